//! JSON kept long in memory, deflated. What a replica keeps for each of thousands of
//! Applications between reconciles (the live objects a plan found unchanged, the desired
//! Revision) is JSON that deflate makes about three times smaller, and it is read back far less
//! often than it lies there (docs/performance.md measured both).

use std::sync::{Arc, Mutex};

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Compact JSON text, deflated, and the text's length; cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed(Arc<[u8]>, usize);

/// Deflate and inflate states, reused: a new one allocates and clears hundreds of KB of
/// tables, far more work than a small object's compression itself. Bounded by how many are in
/// use at once (one per thread packing or unpacking).
static DEFLATERS: Mutex<Vec<Compress>> = Mutex::new(Vec::new());
static INFLATERS: Mutex<Vec<Decompress>> = Mutex::new(Vec::new());

fn deflate(input: &[u8]) -> Vec<u8> {
    let mut c =
        DEFLATERS.lock().expect("deflaters lock").pop().unwrap_or_else(|| Compress::new(Compression::fast(), false));
    c.reset();
    let mut out = Vec::with_capacity(input.len() / 2 + 64);
    let done = loop {
        let read = usize::try_from(c.total_in()).unwrap_or(usize::MAX).min(input.len());
        match c.compress_vec(&input[read..], &mut out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => break true,
            Ok(_) => out.reserve(out.capacity().max(64)),
            Err(_) => break false,
        }
    };
    DEFLATERS.lock().expect("deflaters lock").push(c);
    if !done {
        out.clear();
    }
    out
}

fn inflate(input: &[u8]) -> Option<Vec<u8>> {
    let mut d = INFLATERS.lock().expect("inflaters lock").pop().unwrap_or_else(|| Decompress::new(false));
    d.reset(false);
    let mut out = Vec::with_capacity(input.len() * 4 + 64);
    let got = loop {
        let read = usize::try_from(d.total_in()).unwrap_or(usize::MAX).min(input.len());
        let before = (d.total_in(), d.total_out());
        match d.decompress_vec(&input[read..], &mut out, FlushDecompress::Finish) {
            Ok(Status::StreamEnd) => break Some(()),
            Ok(_) if out.len() == out.capacity() => out.reserve(out.capacity()),
            // No progress with room to write: the input ended before the stream did.
            Ok(_) if (d.total_in(), d.total_out()) == before => break None,
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    INFLATERS.lock().expect("inflaters lock").push(d);
    got.map(|()| out)
}

impl Packed {
    /// `text` (JSON) packed.
    pub fn from_text(text: &str) -> Packed {
        Packed(deflate(text.as_bytes()).into(), text.len())
    }

    /// `value` as compact JSON, packed; `None` if it cannot be printed as JSON.
    pub fn of<T: serde::Serialize + ?Sized>(value: &T) -> Option<Packed> {
        serde_json::to_vec(value).ok().map(|t| Packed(deflate(&t).into(), t.len()))
    }

    /// The JSON text (empty if the bytes were not made by [`Packed::from_text`]).
    pub fn text(&self) -> String {
        inflate(&self.0).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default()
    }

    /// The JSON parsed as `T`.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&inflate(&self.0)?).ok()
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Bytes of the JSON text held.
    pub fn text_len(&self) -> usize {
        self.1
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn a_packed_object_reads_back_as_it_was_and_smaller() {
        let containers: Vec<Value> = (0..5)
            .map(|i| {
                json!({"name": format!("app-{i}"), "image": "registry.example.com/team/app:1.2.3",
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}})
            })
            .collect();
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a", "labels": {"app.kubernetes.io/managed-by": "kuvryn-sync"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": containers}}}});
        let packed = Packed::of(&deployment).unwrap();
        assert_eq!(packed.parse::<Value>(), Some(deployment.clone()));
        assert_eq!(packed.text(), deployment.to_string());
        assert!(packed.len() * 3 < deployment.to_string().len(), "{} bytes", packed.len());
        assert_eq!(packed.text_len(), deployment.to_string().len());
        assert_eq!(Packed::from_text("").text(), "");
        assert_eq!(Packed(Arc::from(&b"not deflate"[..]), 11).parse::<Value>(), None);
        let cut = Packed(Arc::from(&packed.0[..packed.len() / 2]), packed.1);
        assert_eq!(cut.parse::<Value>(), None, "a stream cut short");
        // Many at once, from several threads: each gets its own state.
        let texts: Vec<String> = (0..64).map(|i| json!({"i": i, "deployment": deployment}).to_string()).collect();
        std::thread::scope(|s| {
            for chunk in texts.chunks(16) {
                s.spawn(move || {
                    for t in chunk {
                        assert_eq!(&Packed::from_text(t).text(), t);
                    }
                });
            }
        });
    }
}
