//! A model's inputs as requests give them: tensors, or bytes left where they lie.

use tract_onnx::prelude::Tensor;

use super::DataType;

/// An input as a request gives it: decoded into a tensor, or its bytes where they lie (a
/// client's shared memory region, the request's own body), which an engine that can borrow
/// them (ONNX Runtime) reads in place.
pub enum Input {
    Tensor(Tensor),
    InPlace(TensorInPlace),
}

/// A tensor of a fixed-size numeric type whose bytes are exactly its elements, aligned for
/// them: see [`crate::tensor::in_place`].
pub struct TensorInPlace {
    pub datatype: DataType,
    pub shape: Vec<usize>,
    pub place: Place,
}

/// Where a [`TensorInPlace`]'s bytes lie.
pub enum Place {
    Slot(crate::shm::Slot),
    /// A piece of the request's body (binary data, gRPC's raw contents).
    Body(bytes::Bytes),
}

impl Place {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Place::Slot(slot) => slot.bytes(),
            Place::Body(bytes) => bytes,
        }
    }
}

impl Input {
    pub fn datatype(&self) -> Option<DataType> {
        match self {
            Input::Tensor(t) => DataType::of(t.datum_type()),
            Input::InPlace(t) => Some(t.datatype),
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            Input::Tensor(t) => t.shape(),
            Input::InPlace(t) => &t.shape,
        }
    }

    /// The input as a tensor of its own: one in place is copied.
    pub fn into_tensor(self) -> Result<Tensor, String> {
        match self {
            Input::Tensor(t) => Ok(t),
            Input::InPlace(t) => crate::tensor::from_bytes(t.datatype, &t.shape, t.place.bytes()),
        }
    }
}

impl From<Tensor> for Input {
    fn from(t: Tensor) -> Input {
        Input::Tensor(t)
    }
}
