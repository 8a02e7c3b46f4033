//! Writing JSON-RPC messages: requests, notifications, results, errors and
//! batches, with a fallback error when a result cannot be serialized.

use super::*;

/// A value that could not be serialized into an envelope.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot serialize the JSON-RPC message: {0}; check the value's Serialize impl (maps need string keys)"
)]
pub struct EncodeError(#[from] serde_json::Error);

/// Written when serializing a value whose shape is fixed fails anyway.
pub(super) const FALLBACK_ERROR: &[u8] =
    br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error"}}"#;

#[derive(Serialize)]
pub(super) struct OutCall<'r, P: ?Sized> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'r Id<'r>>,
    method: &'r str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'r P>,
}

#[derive(Serialize)]
pub(super) struct OutResult<'r, R: ?Sized> {
    jsonrpc: &'static str,
    id: &'r Id<'r>,
    result: &'r R,
}

#[derive(Serialize)]
pub(super) struct OutError<'r> {
    jsonrpc: &'static str,
    id: &'r Id<'r>,
    error: &'r ErrorObject,
}

/// A request `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`; `params`
/// omitted when `None` (write `None::<&()>`).
pub fn encode_request<P: Serialize + ?Sized>(
    id: &Id<'_>,
    method: &str,
    params: Option<&P>,
) -> Result<Vec<u8>, EncodeError> {
    let id = id.as_borrowed();
    Ok(serde_json::to_vec(&OutCall {
        jsonrpc: JSONRPC_VERSION,
        id: Some(&id),
        method,
        params,
    })?)
}

/// A notification `{"jsonrpc":"2.0","method":…,"params":…}`; `params`
/// omitted when `None` (write `None::<&()>`).
pub fn encode_notification<P: Serialize + ?Sized>(
    method: &str,
    params: Option<&P>,
) -> Result<Vec<u8>, EncodeError> {
    Ok(serde_json::to_vec(&OutCall {
        jsonrpc: JSONRPC_VERSION,
        id: None,
        method,
        params,
    })?)
}

/// A success response `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn encode_result<R: Serialize + ?Sized>(
    id: &Id<'_>,
    result: &R,
) -> Result<Vec<u8>, EncodeError> {
    let id = id.as_borrowed();
    Ok(serde_json::to_vec(&OutResult {
        jsonrpc: JSONRPC_VERSION,
        id: &id,
        result,
    })?)
}

/// A success response for a result whose serialization cannot fail (this
/// crate's own types): on the impossible failure, an `INTERNAL_ERROR`
/// response without an id instead of a broken message.
pub(crate) fn encode_reply<R: Serialize + ?Sized>(id: &Id<'_>, result: &R) -> Vec<u8> {
    encode_result(id, result).unwrap_or_else(|_| FALLBACK_ERROR.to_vec())
}

/// The error response for a canonical error; `id` renders `null` when `None`.
pub fn encode_error(id: Option<&Id<'_>>, error: CanonicalError, detail: Option<&str>) -> Vec<u8> {
    encode_error_object(id, &error.error_object(id, detail))
}

/// The error response carrying `object` (e.g. one with a JSON pointer added);
/// `id` renders `null` when `None`.
pub fn encode_error_object(id: Option<&Id<'_>>, object: &ErrorObject) -> Vec<u8> {
    let id = id.map_or(Id::Null, Id::as_borrowed);
    serde_json::to_vec(&OutError {
        jsonrpc: JSONRPC_VERSION,
        id: &id,
        error: object,
    })
    .unwrap_or_else(|_| FALLBACK_ERROR.to_vec())
}

/// Joins the replies to one batch into a JSON array; `None` when there are
/// none, meaning: send nothing at all (JSON-RPC 2.0 section 6).
pub fn encode_batch<I>(replies: I) -> Option<Vec<u8>>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let mut out = Vec::new();
    for reply in replies {
        out.push(if out.is_empty() { b'[' } else { b',' });
        out.extend_from_slice(reply.as_ref());
    }
    if out.is_empty() {
        return None;
    }
    out.push(b']');
    Some(out)
}
