//! ROOT's object serialisation written by hand, for the tree reader's unit tests.

/// An object of a new class in a list: its class name, and what writes its members.
pub(super) type Item<'a> = (&'a str, &'a dyn Fn(&mut W));

/// ROOT's big-endian serialisation, written by hand.
#[derive(Default)]
pub(super) struct W(pub(super) Vec<u8>);

impl W {
    pub(super) fn put(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    pub(super) fn i32(&mut self, x: i32) -> &mut Self {
        self.put(&x.to_be_bytes())
    }
    pub(super) fn f64(&mut self, x: f64) -> &mut Self {
        self.put(&x.to_be_bytes())
    }
    pub(super) fn text(&mut self, s: &str) -> &mut Self {
        self.put(&[s.len() as u8]).put(s.as_bytes())
    }
    /// A byte count and class version around what `body` writes.
    pub(super) fn versioned(&mut self, version: i16, body: impl FnOnce(&mut W)) -> &mut Self {
        let at = self.0.len();
        self.put(&[0; 4]).put(&version.to_be_bytes());
        body(self);
        let count = (self.0.len() - at - 4) as u32 | 0x4000_0000;
        self.0[at..at + 4].copy_from_slice(&count.to_be_bytes());
        self
    }
    pub(super) fn named(&mut self, name: &str, title: &str) -> &mut Self {
        self.versioned(1, |w| {
            // TObject: version, unique id, bits (no byte count).
            w.put(&1i16.to_be_bytes()).i32(0).i32(0x0300_0000);
            w.text(name).text(title);
        })
    }
    /// A `TObjArray` of objects of new classes, each written by `body`.
    pub(super) fn objarray(&mut self, items: &[Item<'_>]) -> &mut Self {
        self.versioned(3, |w| {
            w.put(&1i16.to_be_bytes()).i32(0).i32(0x0300_0000);
            w.text("").i32(items.len() as i32).i32(0);
            for (class, body) in items {
                let at = w.0.len();
                w.put(&[0; 4]).put(&u32::MAX.to_be_bytes());
                w.put(class.as_bytes()).put(&[0]);
                body(w);
                let count = (w.0.len() - at - 4) as u32 | 0x4000_0000;
                w.0[at..at + 4].copy_from_slice(&count.to_be_bytes());
            }
        })
    }
}
