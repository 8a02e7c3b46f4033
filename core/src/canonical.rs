//! Canonical JSON (RFC 8785, "JCS"), streamed from JSON bytes into any sink.
//!
//! [`write_with`] reads JSON text and writes its canonical form into a
//! [`Sink`] (a `Vec<u8>`, or a `sha2::Sha256` directly, so hashing needs no
//! intermediate buffer). It never builds a `serde_json::Value`. It works in
//! two passes over the input:
//!
//! 1. **Validate and index.** Strict RFC 8259 syntax (no trailing garbage,
//!    no leading zeros, no raw control characters in strings, valid UTF-8)
//!    plus the I-JSON rules that RFC 8785 requires (no duplicate member
//!    names after unescaping, no lone surrogate escapes, every number a
//!    finite IEEE-754 double and, under [`Profile::Rfc8785`], no integer
//!    literal outside the I-JSON safe range ±(2^53 − 1), which a double
//!    cannot tell from its neighbours). The result is a flat "tape": one small node per
//!    value holding byte spans of the input, and for every object the sorted
//!    order of its members. Member names are compared in place; only names
//!    that contain escapes are unescaped, into one shared arena.
//! 2. **Emit.** Walk the tape and write canonical bytes, copying string runs
//!    straight from the input and batching small writes.
//!
//! Every error is found in pass 1, so when an error is returned nothing has
//! been written to the sink.
//!
//! Limits: the input size ([`Options::max_input_bytes`]) is checked before
//! anything else; nesting is bounded by [`Options::max_depth`] and both
//! passes are iterative (an explicit stack, no recursion), so deep input can
//! never overflow the call stack. Memory use is linear in the input size.
//!
//! Two profiles exist ([`Profile`]): RFC 8785 exactly, and Decision Gate's
//! own variant (the `serde_jcs` 0.1.0 crate), which orders members by the
//! bytes of their escaped names and prints 64-bit integers verbatim. The
//! rules and the differences are written out in `spec/canonical-json.md`.
//!
//! ```
//! use evidence_wire::canonical::{to_vec, to_vec_with, CanonicalizeErrorKind, Options, Profile};
//!
//! let json = br#"{"b": [1.0, 1e2, -0], "a": "\u00e9", "n": 9007199254740991}"#;
//! assert_eq!(to_vec(json)?, r#"{"a":"é","b":[1,100,0],"n":9007199254740991}"#.as_bytes());
//! // 2^53 + 1 is no double: RFC 8785 would hash it as 2^53, so it is refused.
//! let big = br#"{"n": [9007199254740993]}"#;
//! let refused = to_vec(big).unwrap_err();
//! assert!(matches!(refused.kind, CanonicalizeErrorKind::UnsafeInteger { ref pointer, .. } if pointer == "/n/0"));
//! // Decision Gate's profile keeps 64-bit integers exact.
//! let dg = to_vec_with(big, &Options::with_profile(Profile::DecisionGate))?;
//! assert_eq!(dg, br#"{"n":[9007199254740993]}"#);
//! # Ok::<(), evidence_wire::canonical::CanonicalizeError>(())
//! ```

use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Ordering;

mod scalars;
use scalars::*;

/// Which canonicalization rules to apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Profile {
    /// RFC 8785 exactly (the default everywhere), on I-JSON input: integer
    /// literals outside ±(2^53 − 1) are refused
    /// ([`CanonicalizeErrorKind::UnsafeInteger`]).
    #[default]
    Rfc8785,
    /// Decision Gate's own canonicalization (`serde_jcs` 0.1.0), for hashes
    /// and signatures that Decision Gate accepts byte for byte.
    DecisionGate,
}

impl Profile {
    /// The profile's name as configuration and the command line spell it:
    /// `rfc8785` or `decision-gate`.
    pub const fn name(self) -> &'static str {
        match self {
            Profile::Rfc8785 => "rfc8785",
            Profile::DecisionGate => "decision-gate",
        }
    }
}

impl core::fmt::Display for Profile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Limits and profile for one canonicalization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// The rules to apply.
    pub profile: Profile,
    /// Deepest nesting of arrays and objects accepted (default 128).
    pub max_depth: usize,
    /// Largest input accepted, in bytes (default 64 MiB).
    pub max_input_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            profile: Profile::Rfc8785,
            max_depth: 128,
            max_input_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Options {
    /// Default limits with the given profile.
    pub fn with_profile(profile: Profile) -> Self {
        Options {
            profile,
            ..Options::default()
        }
    }

    /// The same options with another nesting limit.
    pub fn with_max_depth(mut self, max_depth: usize) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// The same options with another input size limit.
    pub fn with_max_input_bytes(mut self, max_input_bytes: usize) -> Self {
        self.max_input_bytes = max_input_bytes;
        self
    }
}

/// Where canonical bytes go: a buffer, or a hasher directly.
pub trait Sink {
    /// Append bytes.
    fn write_bytes(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn write_bytes(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for sha2::Sha256 {
    fn write_bytes(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

/// Why input could not be canonicalized.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot canonicalize JSON at byte {offset}: {kind}")]
pub struct CanonicalizeError {
    /// What was wrong.
    pub kind: CanonicalizeErrorKind,
    /// Byte offset in the input where it was found.
    pub offset: usize,
}

/// The kinds of [`CanonicalizeError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonicalizeErrorKind {
    /// Not JSON.
    #[error("invalid JSON: {0}")]
    Syntax(&'static str),
    /// An object names the same member twice (I-JSON forbids it).
    #[error("duplicate member name {0:?}")]
    DuplicateKey(String),
    /// A string holds an unpaired UTF-16 surrogate escape.
    #[error("lone surrogate in string")]
    LoneSurrogate,
    /// A number is outside the IEEE-754 double range.
    #[error("number out of IEEE-754 double range")]
    NumberOutOfRange,
    /// Under [`Profile::Rfc8785`]: an integer literal (no fraction, no
    /// exponent) outside the I-JSON safe range ±(2^53 − 1). RFC 8785 reads
    /// numbers as doubles, so it would give this integer the hash of a
    /// different one (`9007199254740993` and `9007199254740992` hash
    /// alike): evidence that does not say which value it asserts.
    #[error(
        "integer {literal} at JSON pointer \"{pointer}\" is outside the I-JSON safe range of ±(2^53 − 1) = ±9007199254740991 that RFC 8785 requires; RFC 8785 would read it as the nearest double, which other integers share, so its hash would not say which value it asserts. Hash it with the `decision-gate` profile (which keeps 64-bit integers exact), or send the number as a string"
    )]
    UnsafeInteger {
        /// The literal as written (shortened past 40 characters).
        literal: String,
        /// Its place in the input, as an RFC 6901 JSON pointer (`""` = the
        /// whole input).
        pointer: String,
    },
    /// Nesting deeper than [`Options::max_depth`].
    #[error("nesting deeper than {0} levels")]
    TooDeep(usize),
    /// Input larger than [`Options::max_input_bytes`].
    #[error("input larger than {0} bytes")]
    TooLarge(usize),
}

/// Canonicalize `json` under RFC 8785 into `sink`.
pub fn write<S: Sink>(json: &[u8], sink: &mut S) -> Result<(), CanonicalizeError> {
    write_with(json, &Options::default(), sink)
}

/// Canonicalize `json` with `options` into `sink`.
///
/// `json` must be exactly one JSON value (surrounding whitespace allowed).
/// On error nothing has been written to `sink`.
pub fn write_with<S: Sink>(
    json: &[u8],
    options: &Options,
    sink: &mut S,
) -> Result<(), CanonicalizeError> {
    if json.len() > options.max_input_bytes {
        return Err(error(
            CanonicalizeErrorKind::TooLarge(options.max_input_bytes),
            options.max_input_bytes,
        ));
    }
    if let Err(invalid) = core::str::from_utf8(json) {
        return Err(syntax(
            "invalid UTF-8; JSON text must be encoded as UTF-8",
            invalid.valid_up_to(),
        ));
    }
    let tape = Parser::new(json, options).parse()?;
    let mut out = Out {
        sink,
        buffer: [0; OUT_BUFFER],
        len: 0,
    };
    let result = tape.emit(&mut out);
    out.flush();
    result
}

/// Canonical bytes of `json` under RFC 8785.
pub fn to_vec(json: &[u8]) -> Result<Vec<u8>, CanonicalizeError> {
    to_vec_with(json, &Options::default())
}

/// Canonical bytes of `json` with `options`.
pub fn to_vec_with(json: &[u8], options: &Options) -> Result<Vec<u8>, CanonicalizeError> {
    let mut out = Vec::with_capacity(json.len().min(options.max_input_bytes));
    write_with(json, options, &mut out)?;
    Ok(out)
}

/// Canonical bytes of an in-memory value.
pub fn value_to_vec(
    value: &serde_json::Value,
    options: &Options,
) -> Result<Vec<u8>, CanonicalizeError> {
    let bytes = serde_json::to_vec(value).map_err(|_| CanonicalizeError {
        kind: CanonicalizeErrorKind::Syntax("value cannot be serialized"),
        offset: 0,
    })?;
    to_vec_with(&bytes, options)
}

/// SHA-256 of the canonical bytes of `json`.
pub fn sha256(json: &[u8], options: &Options) -> Result<[u8; 32], CanonicalizeError> {
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    if json.len() <= options.max_input_bytes && is_canonical_scalar(json) {
        // Its own canonical form: hashed as it is, without the parser's
        // tape (a third of the work of hashing a small answer).
        sha2::Digest::update(&mut hasher, json);
    } else {
        write_with(json, options, &mut hasher)?;
    }
    Ok(sha2::Digest::finalize(hasher).into())
}

/// Whether `json` is, byte for byte, its own canonical form under every
/// profile: `true`, `false`, `null`, or an integer of at most 15 digits
/// (below 2^53, so exact) without leading zeros and not `-0` (written
/// `0`). The usual small answers of checks; anything else, surrounding
/// whitespace included, takes the parser. `tests::scalars_are_hashed_as_the_parser_writes_them`
/// holds this to [`write_with`] under both profiles.
fn is_canonical_scalar(json: &[u8]) -> bool {
    match json {
        b"true" | b"false" | b"null" | b"0" => true,
        _ => match json.strip_prefix(b"-").unwrap_or(json) {
            [b'1'..=b'9', rest @ ..] => rest.len() < 15 && rest.iter().all(u8::is_ascii_digit),
            _ => false,
        },
    }
}

/// Lowercase hex of bytes.
pub fn hex_lower(bytes: &[u8]) -> String {
    // Filled in place, two digits per byte from a table: a `push` per
    // digit costs a capacity check each.
    let mut out = alloc::vec![0u8; bytes.len().saturating_mul(2)];
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&hex_pair(*byte));
    }
    // Only ASCII digits and letters were written.
    String::from_utf8(out).unwrap_or_default()
}

/// The two lowercase hexadecimal digits of every byte value.
const HEX_PAIRS: [[u8; 2]; 256] = {
    let mut table = [[0u8; 2]; 256];
    let mut byte = 0u8;
    const fn digit(nibble: u8) -> u8 {
        if nibble < 10 {
            b'0' + nibble
        } else {
            b'a' + (nibble - 10)
        }
    }
    loop {
        // A constant loop over 0..=255: every index is in bounds.
        #[allow(clippy::indexing_slicing)]
        {
            table[byte as usize] = [digit(byte >> 4), digit(byte & 0x0f)];
        }
        if byte == u8::MAX {
            break table;
        }
        byte += 1;
    }
};

/// The two lowercase hexadecimal digits of `byte`.
pub(crate) fn hex_pair(byte: u8) -> [u8; 2] {
    HEX_PAIRS.get(usize::from(byte)).copied().unwrap_or(*b"00")
}

/// Writes the canonical form (ECMAScript `Number.prototype.toString`) of a
/// finite double into `sink`; `-0` is written as `0`.
///
/// Returns [`CanonicalizeErrorKind::NumberOutOfRange`] for NaN and the
/// infinities, which JSON cannot represent.
pub fn write_number<S: Sink>(value: f64, sink: &mut S) -> Result<(), CanonicalizeError> {
    if !value.is_finite() {
        return Err(error(CanonicalizeErrorKind::NumberOutOfRange, 0));
    }
    if value == 0.0 {
        sink.write_bytes(b"0");
    } else {
        sink.write_bytes(ryu_js::Buffer::new().format_finite(value).as_bytes());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Pass 1: validation and the tape.

/// Size of the batching buffer in front of the sink.
const OUT_BUFFER: usize = 1024;

/// One value on the tape. Spans are byte offsets into the input.
#[derive(Clone, Copy, Debug)]
enum Node {
    Null,
    True,
    False,
    /// A number whose input text is already its canonical form.
    Verbatim {
        start: usize,
        end: usize,
    },
    /// A number printed from its value.
    Number(f64),
    /// A string; `start..end` is the text between the quotes.
    String {
        start: usize,
        end: usize,
        escaped: bool,
    },
    /// An array; its elements follow on the tape up to node `end`.
    Array {
        end: usize,
    },
    /// An object; its members (name node, then value subtree) follow on the
    /// tape up to node `end`; `orders[order_start..][..count]` lists the
    /// name nodes in canonical order.
    Object {
        end: usize,
        order_start: usize,
        count: usize,
    },
}

/// A member name of an object still open, with the bytes it sorts by.
#[derive(Clone, Copy, Debug)]
struct Member {
    /// Tape index of the name's string node.
    node: usize,
    /// Offset of the name's opening quote in the input.
    offset: usize,
    /// Sort bytes: `input[start..end]`, or `arena[start..end]` if `in_arena`.
    start: usize,
    end: usize,
    in_arena: bool,
    /// The first sort bytes as a number ([`sort_prefix`]): most comparisons
    /// end here.
    prefix: u64,
}

/// A container being parsed.
#[derive(Clone, Copy, Debug)]
struct Open {
    node: usize,
    is_object: bool,
    member_base: usize,
}

struct Parser<'a> {
    input: &'a [u8],
    profile: Profile,
    max_depth: usize,
    nodes: Vec<Node>,
    orders: Vec<usize>,
    /// Sort forms of member names that contain escapes.
    arena: Vec<u8>,
    /// Members of the objects still open, innermost last.
    pending: Vec<Member>,
    /// (sort prefix, member index) pairs of the object being sorted.
    scratch: Vec<(u64, usize)>,
    stack: Vec<Open>,
}

/// The validated document, ready to be written.
struct Tape<'a> {
    input: &'a [u8],
    nodes: Vec<Node>,
    orders: Vec<usize>,
    max_depth: usize,
}

fn error(kind: CanonicalizeErrorKind, offset: usize) -> CanonicalizeError {
    CanonicalizeError { kind, offset }
}

fn syntax(what: &'static str, offset: usize) -> CanonicalizeError {
    error(CanonicalizeErrorKind::Syntax(what), offset)
}

fn hex_digit(nibble: u8) -> char {
    char::from_digit(u32::from(nibble), 16).unwrap_or('0')
}

fn skip_whitespace(input: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = input.get(pos) {
        pos += 1;
    }
    pos
}

fn skip_digits(input: &[u8], mut pos: usize) -> usize {
    while let Some(b'0'..=b'9') = input.get(pos) {
        pos += 1;
    }
    pos
}

impl<'a> Parser<'a> {
    fn new(input: &'a [u8], options: &Options) -> Self {
        Parser {
            input,
            profile: options.profile,
            max_depth: options.max_depth,
            // Every node consumes at least one input byte; this guess only
            // saves early reallocations.
            nodes: Vec::with_capacity(input.len() / 8 + 1),
            orders: Vec::new(),
            arena: Vec::new(),
            pending: Vec::new(),
            scratch: Vec::new(),
            stack: Vec::new(),
        }
    }

    fn parse(mut self) -> Result<Tape<'a>, CanonicalizeError> {
        let input = self.input;
        let mut pos = skip_whitespace(input, 0);
        if pos >= input.len() {
            return Err(syntax("empty input; expected one JSON value", pos));
        }
        'value: loop {
            // One value starts at `pos`.
            let Some(&byte) = input.get(pos) else {
                return Err(syntax("unexpected end of input; expected a value", pos));
            };
            match byte {
                b'{' | b'[' => {
                    if self.stack.len() >= self.max_depth {
                        return Err(error(CanonicalizeErrorKind::TooDeep(self.max_depth), pos));
                    }
                    let is_object = byte == b'{';
                    let node = self.nodes.len();
                    self.nodes.push(Node::Array { end: node });
                    self.stack.push(Open {
                        node,
                        is_object,
                        member_base: self.pending.len(),
                    });
                    pos = skip_whitespace(input, pos + 1);
                    let close = if is_object { b'}' } else { b']' };
                    if input.get(pos) == Some(&close) {
                        pos += 1;
                        self.close()?;
                    } else {
                        if is_object {
                            pos = self.member_name(pos)?;
                        }
                        continue 'value;
                    }
                }
                b'"' => {
                    let (end, escaped) = scan_string(input, pos)?;
                    self.nodes.push(Node::String {
                        start: pos + 1,
                        end,
                        escaped,
                    });
                    pos = end + 1;
                }
                b'-' | b'0'..=b'9' => {
                    let (node, end) =
                        scan_number(input, pos, self.profile).map_err(|mut error| {
                            if let CanonicalizeErrorKind::UnsafeInteger { pointer, .. } =
                                &mut error.kind
                            {
                                *pointer = self.pointer_here();
                            }
                            error
                        })?;
                    self.nodes.push(node);
                    pos = end;
                }
                b't' => pos = self.literal(pos, b"true", Node::True)?,
                b'f' => pos = self.literal(pos, b"false", Node::False)?,
                b'n' => pos = self.literal(pos, b"null", Node::Null)?,
                _ => {
                    return Err(syntax(
                        "expected a value (object, array, string, number, true, false or null)",
                        pos,
                    ));
                }
            }
            // A value is complete: close containers, or go to the next one.
            loop {
                pos = skip_whitespace(input, pos);
                let Some(open) = self.stack.last().copied() else {
                    if pos < input.len() {
                        return Err(syntax(
                            "unexpected data after the JSON value; send exactly one value",
                            pos,
                        ));
                    }
                    return Ok(Tape {
                        input,
                        nodes: self.nodes,
                        orders: self.orders,
                        max_depth: self.max_depth,
                    });
                };
                match (input.get(pos), open.is_object) {
                    (Some(b','), false) => {
                        pos = skip_whitespace(input, pos + 1);
                        continue 'value;
                    }
                    (Some(b','), true) => {
                        pos = skip_whitespace(input, pos + 1);
                        pos = self.member_name(pos)?;
                        continue 'value;
                    }
                    (Some(b']'), false) | (Some(b'}'), true) => {
                        pos += 1;
                        self.close()?;
                    }
                    (_, false) => {
                        return Err(syntax("expected ',' or ']' after an array element", pos));
                    }
                    (_, true) => {
                        return Err(syntax("expected ',' or '}' after an object member", pos));
                    }
                }
            }
        }
    }

    /// The RFC 6901 JSON pointer of the value about to be pushed (for error
    /// messages only, so it may take its time): for each open object its
    /// member being read, for each open array the count of its finished
    /// elements.
    fn pointer_here(&self) -> String {
        let mut pointer = String::new();
        for (level, open) in self.stack.iter().enumerate() {
            let next = self.stack.get(level + 1);
            pointer.push('/');
            if open.is_object {
                let members_end = next.map_or(self.pending.len(), |inner| inner.member_base);
                let name = members_end
                    .checked_sub(1)
                    .filter(|last| *last >= open.member_base)
                    .and_then(|last| self.pending.get(last))
                    .and_then(|member| self.nodes.get(member.node));
                if let Some(Node::String { start, end, .. }) = name {
                    let mut decoded = Vec::new();
                    if write_string_content(self.input, *start, *end, false, &mut decoded).is_ok() {
                        for c in String::from_utf8_lossy(&decoded).chars() {
                            match c {
                                '~' => pointer.push_str("~0"),
                                '/' => pointer.push_str("~1"),
                                other => pointer.push(other),
                            }
                        }
                    }
                }
            } else {
                // Finished elements are complete subtrees on the tape; the
                // element being read is the next open container, or the
                // value about to be pushed.
                let limit = next.map_or(self.nodes.len(), |inner| inner.node);
                let mut child = open.node + 1;
                let mut index = 0usize;
                while child < limit {
                    child = subtree_end(&self.nodes, child);
                    index += 1;
                }
                pointer.push_str(&alloc::format!("{index}"));
            }
        }
        pointer
    }

    fn literal(
        &mut self,
        pos: usize,
        word: &'static [u8],
        node: Node,
    ) -> Result<usize, CanonicalizeError> {
        let end = pos + word.len();
        if self.input.get(pos..end) != Some(word) {
            return Err(syntax(
                "expected a value (object, array, string, number, true, false or null)",
                pos,
            ));
        }
        self.nodes.push(node);
        Ok(end)
    }

    /// Parses `"name" :` at `pos` (whitespace already skipped) and records
    /// the member; returns the position of its value.
    fn member_name(&mut self, pos: usize) -> Result<usize, CanonicalizeError> {
        let input = self.input;
        if input.get(pos) != Some(&b'"') {
            return Err(syntax("expected a member name in double quotes", pos));
        }
        let (end, escaped) = scan_string(input, pos)?;
        let node = self.nodes.len();
        self.nodes.push(Node::String {
            start: pos + 1,
            end,
            escaped,
        });
        let member = if escaped {
            let arena_start = self.arena.len();
            let escape = self.profile == Profile::DecisionGate;
            write_string_content(input, pos + 1, end, escape, &mut self.arena)?;
            Member {
                node,
                offset: pos,
                start: arena_start,
                end: self.arena.len(),
                in_arena: true,
                prefix: sort_prefix(
                    self.profile,
                    self.arena.get(arena_start..).unwrap_or_default(),
                ),
            }
        } else {
            Member {
                node,
                offset: pos,
                start: pos + 1,
                end,
                in_arena: false,
                prefix: sort_prefix(self.profile, input.get(pos + 1..end).unwrap_or_default()),
            }
        };
        self.pending.push(member);
        let colon = skip_whitespace(input, end + 1);
        if input.get(colon) != Some(&b':') {
            return Err(syntax("expected ':' after a member name", colon));
        }
        Ok(skip_whitespace(input, colon + 1))
    }

    /// Closes the innermost open container: records where it ends and, for
    /// an object, the canonical order of its members.
    fn close(&mut self) -> Result<(), CanonicalizeError> {
        let Some(open) = self.stack.pop() else {
            return Err(syntax("internal error: no open container", 0));
        };
        let end = self.nodes.len();
        let closed = if open.is_object {
            let order_start = self.orders.len();
            let count = self.sort_members(open.member_base)?;
            Node::Object {
                end,
                order_start,
                count,
            }
        } else {
            Node::Array { end }
        };
        if let Some(slot) = self.nodes.get_mut(open.node) {
            *slot = closed;
        }
        Ok(())
    }

    /// Sorts the members above `base` on the pending stack, rejects
    /// duplicates, moves their order to `orders`; returns how many there were.
    fn sort_members(&mut self, base: usize) -> Result<usize, CanonicalizeError> {
        let Parser {
            input,
            profile,
            arena,
            pending,
            orders,
            nodes,
            scratch,
            ..
        } = self;
        let input: &[u8] = input;
        let profile = *profile;
        let members = pending.get(base..).unwrap_or_default();
        let key = |member: &Member| -> &[u8] {
            let source: &[u8] = if member.in_arena { arena } else { input };
            source.get(member.start..member.end).unwrap_or_default()
        };
        let compare = |a: &Member, b: &Member| {
            a.prefix
                .cmp(&b.prefix)
                .then_with(|| compare_names(profile, key(a), key(b)))
        };
        // Fast path: members already in strictly increasing order (this is
        // also the common case for input that is already canonical).
        let in_order = members
            .windows(2)
            .all(|pair| matches!(pair, [a, b] if compare(a, b) == Ordering::Less));
        if in_order {
            orders.extend(members.iter().map(|member| member.node));
        } else {
            // Sort small (prefix, index) pairs rather than whole members.
            let by_index = |a: usize, b: usize| match (members.get(a), members.get(b)) {
                (Some(a), Some(b)) => compare_names(profile, key(a), key(b)),
                _ => Ordering::Equal,
            };
            scratch.clear();
            scratch.extend(
                members
                    .iter()
                    .enumerate()
                    .map(|(index, m)| (m.prefix, index)),
            );
            scratch.sort_unstable_by(|(prefix_a, a), (prefix_b, b)| {
                prefix_a.cmp(prefix_b).then_with(|| by_index(*a, *b))
            });
            for pair in scratch.windows(2) {
                let [(prefix_a, a), (prefix_b, b)] = pair else {
                    continue;
                };
                if prefix_a == prefix_b && by_index(*a, *b) == Ordering::Equal {
                    let later = members.get(*a.max(b));
                    let name = match later.and_then(|member| nodes.get(member.node)) {
                        Some(Node::String { start, end, .. }) => {
                            let mut decoded = Vec::new();
                            write_string_content(input, *start, *end, false, &mut decoded)?;
                            String::from_utf8_lossy(&decoded).into_owned()
                        }
                        _ => String::new(),
                    };
                    let offset = later.map_or(0, |member| member.offset);
                    return Err(error(CanonicalizeErrorKind::DuplicateKey(name), offset));
                }
            }
            orders.extend(
                scratch
                    .iter()
                    .filter_map(|(_, index)| members.get(*index).map(|member| member.node)),
            );
        }
        let count = members.len();
        pending.truncate(base);
        Ok(count)
    }
}

/// The first eight sort bytes of a member name as a big-endian number,
/// zero-padded, such that names whose prefixes differ compare as their
/// prefixes do ([`compare_names`] decides the rest).
///
/// RFC 8785: bytes 0xEE and 0xEF become 0xFE and 0xFF (bytes UTF-8 never
/// uses), which turns byte order into UTF-16 order as [`compare_names`]
/// explains. Decision Gate: the closing quote is part of the sort bytes.
/// Zero padding is sound: a name that ends inside the prefix sorts first
/// unless the other continues with a real zero byte, and then the prefixes
/// are equal and [`compare_names`] decides.
fn sort_prefix(profile: Profile, name: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let quote: &[u8] = match profile {
        Profile::Rfc8785 => &[],
        Profile::DecisionGate => b"\"",
    };
    for (slot, byte) in word.iter_mut().zip(name.iter().chain(quote)) {
        *slot = match (profile, *byte) {
            (Profile::Rfc8785, 0xEE) => 0xFE,
            (Profile::Rfc8785, 0xEF) => 0xFF,
            (_, other) => other,
        };
    }
    u64::from_be_bytes(word)
}

/// Orders two member names, given as their sort bytes.
///
/// RFC 8785: by UTF-16 code units of the unescaped names. The names are
/// UTF-8, whose byte order equals code-point order; UTF-16 order differs
/// only in that U+E000..=U+FFFF (lead bytes 0xEE, 0xEF) sort after the
/// supplementary planes (lead bytes 0xF0..=0xF4, surrogates in UTF-16). At
/// the first differing byte both names are at the same position inside
/// equal prefixes, so either both bytes are continuation bytes of
/// same-length sequences, or both start a character: ranking 0xEE and 0xEF
/// above 0xF4 there gives UTF-16 order.
///
/// Decision Gate: by the bytes of the escaped name followed by its closing
/// quote (`serde_jcs` 0.1.0 sorts serialized keys including their quotes).
fn compare_names(profile: Profile, a: &[u8], b: &[u8]) -> Ordering {
    let differ = a.iter().zip(b).position(|(x, y)| x != y);
    match (profile, differ) {
        (Profile::Rfc8785, Some(at)) => {
            let rank = |byte: Option<&u8>| match byte {
                Some(&lead @ (0xEE | 0xEF)) => u16::from(lead) + 0x10,
                Some(&other) => u16::from(other),
                None => 0,
            };
            rank(a.get(at)).cmp(&rank(b.get(at)))
        }
        (Profile::DecisionGate, Some(at)) => a.get(at).cmp(&b.get(at)),
        (Profile::Rfc8785, None) => a.len().cmp(&b.len()),
        (Profile::DecisionGate, None) => {
            // One is a prefix of the other: the shorter one's closing quote
            // meets the longer one's next byte.
            let next = |longer: &[u8], at: usize| longer.get(at).copied().unwrap_or(b'"');
            match a.len().cmp(&b.len()) {
                Ordering::Equal => Ordering::Equal,
                Ordering::Less => b'"'.cmp(&next(b, a.len())).then(Ordering::Less),
                Ordering::Greater => next(a, b.len()).cmp(&b'"').then(Ordering::Greater),
            }
        }
    }
}

/// Batches small writes in front of the sink (hashers pay per call).
struct Out<'s, S: Sink> {
    sink: &'s mut S,
    buffer: [u8; OUT_BUFFER],
    len: usize,
}

impl<S: Sink> Out<'_, S> {
    fn flush(&mut self) {
        if let Some(pending) = self.buffer.get(..self.len) {
            if !pending.is_empty() {
                self.sink.write_bytes(pending);
            }
        }
        self.len = 0;
    }
}

impl<S: Sink> Sink for Out<'_, S> {
    fn write_bytes(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(slot) = self.buffer.get_mut(self.len..end) {
            slot.copy_from_slice(bytes);
            self.len = end;
            return;
        }
        self.flush();
        if bytes.len() >= OUT_BUFFER / 2 {
            self.sink.write_bytes(bytes);
        } else if let Some(slot) = self.buffer.get_mut(..bytes.len()) {
            slot.copy_from_slice(bytes);
            self.len = bytes.len();
        }
    }
}

/// A container being written.
enum Frame {
    /// Elements are tape nodes `next..end`.
    Array {
        next: usize,
        end: usize,
        first: bool,
    },
    /// Member names are `orders[next..end]`.
    Object {
        next: usize,
        end: usize,
        first: bool,
    },
}

/// Tape index after the (finished) subtree that starts at `index`.
fn subtree_end(nodes: &[Node], index: usize) -> usize {
    match nodes.get(index) {
        Some(Node::Array { end } | Node::Object { end, .. }) => (*end).max(index + 1),
        _ => index + 1,
    }
}

impl Tape<'_> {
    /// Tape index after the subtree that starts at `index`.
    fn subtree_end(&self, index: usize) -> usize {
        subtree_end(&self.nodes, index)
    }

    fn emit<S: Sink>(&self, out: &mut S) -> Result<(), CanonicalizeError> {
        let mut frames: Vec<Frame> = Vec::with_capacity(self.max_depth.min(32));
        let mut current = 0;
        loop {
            match self.nodes.get(current) {
                Some(Node::Null) => out.write_bytes(b"null"),
                Some(Node::True) => out.write_bytes(b"true"),
                Some(Node::False) => out.write_bytes(b"false"),
                Some(Node::Verbatim { start, end }) => {
                    out.write_bytes(self.input.get(*start..*end).unwrap_or_default());
                }
                Some(Node::Number(value)) => write_number(*value, out)?,
                Some(Node::String {
                    start,
                    end,
                    escaped,
                }) => self.emit_string(*start, *end, *escaped, out)?,
                Some(Node::Array { end }) => {
                    out.write_bytes(b"[");
                    frames.push(Frame::Array {
                        next: current + 1,
                        end: *end,
                        first: true,
                    });
                }
                Some(Node::Object {
                    order_start, count, ..
                }) => {
                    out.write_bytes(b"{");
                    frames.push(Frame::Object {
                        next: *order_start,
                        end: order_start + count,
                        first: true,
                    });
                }
                None => return Err(syntax("internal error: tape index out of range", 0)),
            }
            // Find the next value to write, closing finished containers.
            loop {
                let Some(frame) = frames.last_mut() else {
                    return Ok(());
                };
                match frame {
                    Frame::Array { next, end, first } if *next < *end => {
                        if !core::mem::replace(first, false) {
                            out.write_bytes(b",");
                        }
                        current = *next;
                        *next = self.subtree_end(current);
                        break;
                    }
                    Frame::Array { .. } => out.write_bytes(b"]"),
                    Frame::Object { next, end, first } if *next < *end => {
                        if !core::mem::replace(first, false) {
                            out.write_bytes(b",");
                        }
                        let name = self.orders.get(*next).copied().unwrap_or(0);
                        *next += 1;
                        if let Some(Node::String {
                            start,
                            end,
                            escaped,
                        }) = self.nodes.get(name)
                        {
                            self.emit_string(*start, *end, *escaped, out)?;
                        }
                        out.write_bytes(b":");
                        current = name + 1;
                        break;
                    }
                    Frame::Object { .. } => out.write_bytes(b"}"),
                }
                frames.pop();
            }
        }
    }

    fn emit_string<S: Sink>(
        &self,
        start: usize,
        end: usize,
        escaped: bool,
        out: &mut S,
    ) -> Result<(), CanonicalizeError> {
        out.write_bytes(b"\"");
        if escaped {
            write_string_content(self.input, start, end, true, out)?;
        } else {
            // Without escapes the text holds no quote, backslash or control
            // character: it is already canonical.
            out.write_bytes(self.input.get(start..end).unwrap_or_default());
        }
        out.write_bytes(b"\"");
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;

    /// The digit table against `format!` for every byte value.
    #[test]
    fn hex_digits_are_what_format_writes() {
        let every: Vec<u8> = (0..=255u8).collect();
        let expected: String = every.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(super::hex_lower(&every), expected);
        assert_eq!(super::hex_lower(&[]), "");
    }

    /// The hash of the bytes themselves that `sha256` takes for a canonical
    /// scalar, against the hash of what the parser writes, under both
    /// profiles; and a scalar that is not canonical (or not JSON) is never
    /// taken as one.
    #[test]
    fn scalars_are_hashed_as_the_parser_writes_them() {
        use super::{Options, Profile, is_canonical_scalar, sha256, write_with};
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        let fixed = [
            "0",
            "-0",
            "00",
            "01",
            "-01",
            "-",
            "",
            "1",
            "-1",
            "9",
            "10",
            "1.0",
            "1e2",
            "1E2",
            "true",
            "false",
            "null",
            "True",
            "nul",
            " 1",
            "1 ",
            "+1",
            "999999999999999",
            "-999999999999999",
            "1000000000000000",
            "9007199254740991",
            "9007199254740993",
            "1710000000000",
            "\"1\"",
            "[1]",
            "1,",
        ];
        let generated =
            proptest::string::string_regex("-?[0-9]{0,18}(\\.[0-9])?|true|false|null|-?0[0-9]*")
                .expect("regex");
        let check = |text: &str| -> Result<(), TestCaseError> {
            for profile in [Profile::Rfc8785, Profile::DecisionGate] {
                let options = Options::with_profile(profile);
                let mut parsed = <sha2::Sha256 as sha2::Digest>::new();
                let parser = write_with(text.as_bytes(), &options, &mut parsed)
                    .map(|()| <[u8; 32]>::from(sha2::Digest::finalize(parsed)));
                if is_canonical_scalar(text.as_bytes()) {
                    let mut canonical = Vec::new();
                    write_with(text.as_bytes(), &options, &mut canonical)
                        .map_err(|error| TestCaseError::fail(format!("{text:?}: {error:?}")))?;
                    prop_assert_eq!(canonical.as_slice(), text.as_bytes(), "{:?}", profile);
                }
                prop_assert_eq!(
                    sha256(text.as_bytes(), &options).ok(),
                    parser.ok(),
                    "{:?} {:?}",
                    text,
                    profile
                );
            }
            Ok(())
        };
        for text in fixed {
            check(text).unwrap();
        }
        TestRunner::new(Config::with_cases(2000))
            .run(&generated, |text| check(&text))
            .unwrap();
        assert!(is_canonical_scalar(b"1710000000000") && !is_canonical_scalar(b"-0"));
    }
}
