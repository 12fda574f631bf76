//! A batch of events as the PFN reads it: every event's objects one after the other (no padding)
//! with the event each belongs to, and the events' global features.

use burn::prelude::*;

/// Events' objects and globals on the host, in event order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PfnBatch {
    /// Events.
    pub n_events: usize,
    /// Features per object.
    pub d_node: usize,
    /// Global features per event.
    pub d_global: usize,
    /// `[n_objects, d_node]` row-major, event by event.
    pub objects: Vec<f32>,
    /// `[n_objects]`: the event (row of the batch) of each object.
    pub object_event: Vec<i64>,
    /// `[n_events, d_global]` row-major.
    pub globals: Vec<f32>,
}

impl PfnBatch {
    /// The batch of events given as `(objects [n, d_node], globals [d_global])`, in order.
    pub fn collate<'a>(
        events: impl IntoIterator<Item = (&'a [f32], &'a [f32])>,
        d_node: usize,
        d_global: usize,
    ) -> PfnBatch {
        let mut b = PfnBatch {
            d_node,
            d_global,
            ..PfnBatch::default()
        };
        for (objects, globals) in events {
            let n = objects.len() / d_node.max(1);
            b.objects.extend_from_slice(objects);
            b.object_event
                .extend(std::iter::repeat_n(b.n_events as i64, n));
            b.globals.extend_from_slice(globals);
            b.n_events += 1;
        }
        b
    }

    /// Objects in the batch.
    pub fn n_objects(&self) -> usize {
        self.object_event.len()
    }

    /// The batch's tensors on `device`: objects `[n_objects, d_node]`, the event of each object
    /// `[n_objects]`, globals `[n_events, d_global]`.
    pub fn to_device<B: Backend>(
        &self,
        device: &B::Device,
    ) -> (Tensor<B, 2>, Tensor<B, 1, Int>, Tensor<B, 2>) {
        let n = self.n_objects();
        let objects = Tensor::from_data(
            TensorData::new(self.objects.clone(), [n, self.d_node]),
            device,
        );
        let object_event =
            Tensor::from_data(TensorData::new(self.object_event.clone(), [n]), device);
        let globals = Tensor::from_data(
            TensorData::new(self.globals.clone(), [self.n_events, self.d_global]),
            device,
        );
        (objects, object_event, globals)
    }
}
