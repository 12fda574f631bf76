//! Wall time per `tracing` span name: how the benchmarks split a run into the model's blocks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Accumulates wall time per span name (and `step` field) while enabled: a `tracing` layer
/// (install it with `tracing_subscriber::registry().with(timer.clone()).init()`).
#[derive(Clone, Default)]
pub struct SpanTimer {
    enabled: Arc<Mutex<bool>>,
    times: Arc<Mutex<BTreeMap<String, f64>>>,
}

struct Label_(String);
struct Entered(Instant);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SpanTimer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        struct Step(Option<u64>);
        impl tracing::field::Visit for Step {
            fn record_u64(&mut self, f: &tracing::field::Field, v: u64) {
                if f.name() == "step" {
                    self.0 = Some(v);
                }
            }
            fn record_i64(&mut self, f: &tracing::field::Field, v: i64) {
                if f.name() == "step" {
                    self.0 = Some(v as u64);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut step = Step(None);
        attrs.record(&mut step);
        let name = match step.0 {
            Some(s) => format!("step {s} {}", attrs.metadata().name()),
            None => attrs.metadata().name().to_owned(),
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Label_(name));
        }
    }
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Entered(Instant::now()));
        }
    }
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let Some(Entered(t)) = ext.remove::<Entered>() else {
            return;
        };
        if *self
            .enabled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            let name = ext
                .get_mut::<Label_>()
                .map_or_else(|| span.name().to_owned(), |l| l.0.clone());
            *self
                .times
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(name)
                .or_default() += t.elapsed().as_secs_f64();
        }
    }
}

impl SpanTimer {
    /// The wall time per span name spent inside `f` (spans entered on this thread or any).
    pub fn measure(&self, f: impl FnOnce()) -> BTreeMap<String, f64> {
        let set = |on: bool| {
            *self
                .enabled
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = on;
        };
        self.times
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        set(true);
        f();
        set(false);
        self.times
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
