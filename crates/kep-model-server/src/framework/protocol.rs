//! The frames kep and its framework worker exchange (`worker.py` describes them): a u32
//! little-endian length, a JSON header, then the raw bytes of the tensors it lists.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tract_onnx::prelude::Tensor;

use crate::model::DataType;

/// A tensor in a header: its bytes follow the header, after those of the tensors before it.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireTensor {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<usize>,
    pub size: usize,
}

/// An answer's header: a `result`, output `tensors`, or an `error`.
#[derive(Debug, Deserialize)]
pub struct Reply {
    pub id: u64,
    #[serde(default)]
    pub result: Value,
    #[serde(default)]
    pub tensors: Vec<WireTensor>,
    pub error: Option<WireError>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum WireError {
    /// The framework (or numpy) does not import: `package` installs it.
    Unavailable {
        framework: String,
        package: String,
    },
    Unreadable {
        message: String,
    },
    Failed {
        message: String,
    },
}

/// A request: `header` (an object) with `id` and the tensors' entries added, then their bytes
/// in the binary tensor format (BYTES elements each a u32 length and its bytes).
pub fn request(
    id: u64,
    mut header: Value,
    tensors: &[(String, Tensor)],
) -> Result<Vec<u8>, String> {
    let mut entries = Vec::with_capacity(tensors.len());
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let datatype = DataType::of(t.datum_type())
            .ok_or_else(|| format!("{name}: element type {:?}", t.datum_type()))?;
        let bytes = crate::tensor::to_bytes(t, datatype)?;
        entries.push(WireTensor {
            name: name.clone(),
            datatype,
            shape: t.shape().to_vec(),
            size: bytes.len(),
        });
        data.push(bytes);
    }
    header["id"] = id.into();
    header["tensors"] = serde_json::to_value(entries).map_err(|e| e.to_string())?;
    let head = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
    let len = u32::try_from(head.len()).map_err(|_| "the request's header is too long")?;
    let mut frame = Vec::with_capacity(4 + head.len() + data.iter().map(Vec::len).sum::<usize>());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&head);
    data.iter().for_each(|d| frame.extend_from_slice(d));
    Ok(frame)
}

/// Writes a whole frame and flushes it.
pub fn write(to: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    to.write_all(frame)?;
    to.flush()
}

/// The next answer and its tensors' bytes; an error at the end of the stream.
pub fn read(from: &mut impl Read) -> Result<(Reply, Vec<u8>), String> {
    let mut len = [0; 4];
    from.read_exact(&mut len).map_err(|e| e.to_string())?;
    let mut head = vec![0; u32::from_le_bytes(len) as usize];
    from.read_exact(&mut head).map_err(|e| e.to_string())?;
    let reply: Reply = serde_json::from_slice(&head).map_err(|e| format!("a bad answer: {e}"))?;
    let mut data = vec![0; reply.tensors.iter().map(|t| t.size).sum()];
    from.read_exact(&mut data).map_err(|e| e.to_string())?;
    Ok((reply, data))
}

/// The answer's tensors, in its order.
pub fn tensors(reply: &Reply, data: &[u8]) -> Result<Vec<Tensor>, String> {
    let mut at = 0;
    reply
        .tensors
        .iter()
        .map(|t| {
            let bytes = data
                .get(at..at + t.size)
                .ok_or("an answer shorter than its header")?;
            at += t.size;
            crate::tensor::from_bytes(t.datatype, &t.shape, bytes)
        })
        .collect()
}
