//! GGUF metadata values: the thirteen wire types, typed arrays (kept whole, or as a length-only
//! summary when large), lenient accessors, and the conversion to JSON that `/api/show` prints.
//!
//! Nested arrays (an array whose element type is `ARRAY`) are rejected by the reader: llama.cpp and
//! Ollama both refuse them, no real model uses them, and refusing them bounds nesting depth at 1.

use serde_json::Value as Json;

/// GGUF metadata value type ids (`gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Encoded size of a fixed-size value; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes one value of this type can occupy (a string is at least its u64 length).
    pub(crate) fn min_size(self) -> u64 {
        self.fixed_size().unwrap_or(8)
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Array),
}

/// An array value. `values` is `None` when the reader skipped the elements (see
/// `ReadOptions::full_arrays`); `len` and `elem` are always known.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub elem: ValueType,
    pub len: u64,
    pub values: Option<ArrayValues>,
}

/// Array elements, stored typed so memory stays proportional to the bytes in the file.
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayValues {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// Any integer scalar that is non-negative, widened to u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The JSON Ollama's `/api/show` prints for this value (Go's encoding/json of the decoded
    /// value). An array whose elements were skipped prints `null`, which is exactly what Ollama
    /// prints for every non-empty array when `verbose` is off.
    pub fn to_json(&self) -> Json {
        match self {
            Value::U8(v) => (*v).into(),
            Value::I8(v) => (*v).into(),
            Value::U16(v) => (*v).into(),
            Value::I16(v) => (*v).into(),
            Value::U32(v) => (*v).into(),
            Value::I32(v) => (*v).into(),
            Value::U64(v) => (*v).into(),
            Value::I64(v) => (*v).into(),
            Value::F32(v) => f32_json(*v),
            // Non-finite floats become null (serde_json's rule); Go would fail the whole response.
            Value::F64(v) => (*v).into(),
            Value::Bool(v) => (*v).into(),
            Value::String(v) => v.as_str().into(),
            Value::Array(a) => a.to_json(),
        }
    }
}

/// Go prints a float32 with the shortest digits that round-trip *as a float32* (1e-6, not
/// 9.999999974752427e-7); widening through that decimal text keeps those digits.
fn f32_json(v: f32) -> Json {
    if !v.is_finite() {
        return Json::Null;
    }
    format!("{v}")
        .parse::<f64>()
        .map(Json::from)
        .unwrap_or(Json::Null)
}

impl Array {
    pub fn to_json(&self) -> Json {
        let Some(values) = &self.values else {
            return Json::Null;
        };
        fn list<T: Copy>(v: &[T], f: impl Fn(T) -> Json) -> Json {
            Json::Array(v.iter().map(|x| f(*x)).collect())
        }
        match values {
            ArrayValues::U8(v) => list(v, Json::from),
            ArrayValues::I8(v) => list(v, Json::from),
            ArrayValues::U16(v) => list(v, Json::from),
            ArrayValues::I16(v) => list(v, Json::from),
            ArrayValues::U32(v) => list(v, Json::from),
            ArrayValues::I32(v) => list(v, Json::from),
            ArrayValues::U64(v) => list(v, Json::from),
            ArrayValues::I64(v) => list(v, Json::from),
            ArrayValues::F32(v) => list(v, f32_json),
            ArrayValues::F64(v) => list(v, Json::from),
            ArrayValues::Bool(v) => list(v, Json::from),
            ArrayValues::String(v) => Json::Array(v.iter().map(|s| s.as_str().into()).collect()),
        }
    }

    /// Elements as u64 when the array holds non-negative integers and was read in full.
    pub fn to_u64s(&self) -> Option<Vec<u64>> {
        fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> Option<u64>) -> Option<Vec<u64>> {
            v.iter().map(|x| f(*x)).collect()
        }
        match self.values.as_ref()? {
            ArrayValues::U8(v) => conv(v, |x| Some(x.into())),
            ArrayValues::U16(v) => conv(v, |x| Some(x.into())),
            ArrayValues::U32(v) => conv(v, |x| Some(x.into())),
            ArrayValues::U64(v) => conv(v, Some),
            ArrayValues::I8(v) => conv(v, |x| u64::try_from(x).ok()),
            ArrayValues::I16(v) => conv(v, |x| u64::try_from(x).ok()),
            ArrayValues::I32(v) => conv(v, |x| u64::try_from(x).ok()),
            ArrayValues::I64(v) => conv(v, |x| u64::try_from(x).ok()),
            _ => None,
        }
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value { Value::$v(v) }
        }
    )*};
}
from_scalar!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_owned())
    }
}

macro_rules! from_vec {
    ($($t:ty => $v:ident),*) => {$(
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Value {
                Value::Array(Array { elem: ValueType::$v, len: v.len() as u64, values: Some(ArrayValues::$v(v)) })
            }
        }
    )*};
}
from_vec!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<Vec<&str>> for Value {
    fn from(v: Vec<&str>) -> Value {
        v.into_iter().map(str::to_owned).collect::<Vec<_>>().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_widen_and_refuse() {
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::I32(-1).as_u64(), None);
        assert_eq!(Value::F32(1.0).as_u64(), None);
        assert_eq!(Value::from("x").as_u64(), None);
        assert_eq!(Value::U16(3).as_f64(), Some(3.0));
        assert_eq!(
            Value::from(vec![1u32, 2]).as_array().unwrap().to_u64s(),
            Some(vec![1, 2])
        );
        assert_eq!(
            Value::from(vec![1i32, -2]).as_array().unwrap().to_u64s(),
            None
        );
    }

    #[test]
    fn json_matches_go_rendering() {
        assert_eq!(
            Value::F32(1e-6).to_json().to_string(),
            serde_json::json!(0.000001).to_string()
        );
        assert_eq!(Value::F32(f32::NAN).to_json(), Json::Null);
        assert_eq!(
            Value::from(vec!["a", "b"]).to_json(),
            serde_json::json!(["a", "b"])
        );
        let skipped = Value::Array(Array {
            elem: ValueType::String,
            len: 9,
            values: None,
        });
        assert_eq!(skipped.to_json(), Json::Null);
    }
}
