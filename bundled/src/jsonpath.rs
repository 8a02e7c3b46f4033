//! JSONPath for `json_path`: the expression is bounded before it is parsed,
//! the evaluation before it runs, and the value while it is written.
//!
//! `serde_json_path` parses RFC 9535 by recursive descent, so the depth of
//! its recursion follows the nesting of the expression: about a thousand
//! nested `(` (or five hundred `$[?!`) overflowed a worker's stack and
//! aborted the whole process. Every recursive production of the grammar
//! opens with a `[` (bracketed selection, filter selector, nested query
//! segment), a `(` (parenthesized expression, function arguments) or a
//! logical operator (`?` filter, `!` not), so [`scan`] measures nesting as
//! the number of brackets and parentheses open at a point plus the `?` and
//! `!` inside them, skipping string literals, and refuses more than
//! [`MAX_JSONPATH_NESTING`] before the parser sees the text. The scan is
//! one pass over at most [`MAX_JSONPATH_CHARS`] characters and keeps at
//! most the nesting limit in frames.
//!
//! The evaluation is eager: `serde_json_path` builds every intermediate node
//! list in full, and one short expression can make those lists explode
//! (`$[0,0][0,0]…` doubles per segment, `$..*..*` lists a node once per
//! ancestor, an absolute query inside a filter is evaluated again for every
//! candidate, and each descendant segment copies its results once per
//! level of the document). Before evaluating, [`Shape::cost`] bounds the node visits
//! from the expression's shape and the document's size and depth, and a
//! cost over the budget (see [`EVALUATION_COST_PER_FILE_BYTE`]) is refused.
//!
//! The selected nodes are written as compact JSON by [`encode`], an
//! iterative writer (no recursion on the document's depth) that counts bytes
//! as it goes and stops at the first byte over the limit, refuses values
//! nested deeper than [`MAX_RESULT_DEPTH`], and never copies a node into a
//! new `Value`. The document itself is parsed by `serde_json`, whose
//! recursion stops at 128 levels (`invalid_json`).

use serde_json::Value;
use serde_json::value::RawValue;

/// Longest JSONPath expression, in characters; also the `maxLength` of
/// `jsonpath` in the check's `params_schema`.
pub const MAX_JSONPATH_CHARS: usize = 4096;

/// Deepest nesting of a JSONPath expression: brackets and parentheses open
/// at one point, plus the filter (`?`) and not (`!`) operators inside them.
/// Parsing at this depth uses well under 256 KiB of stack (tested).
pub const MAX_JSONPATH_NESTING: usize = 32;

/// Deepest `json_path` value, in levels of arrays and objects. Decision
/// Gate's reader and ours stop at 128 levels for a whole answer, and the
/// answer wraps the value in up to six levels of its own.
pub const MAX_RESULT_DEPTH: usize = 100;

/// The evaluation budget, in node visits, per byte of `max_file_bytes`
/// (4 visits per byte: 4 Mi visits, a few tens of milliseconds, for the
/// default 1 MiB).
pub const EVALUATION_COST_PER_FILE_BYTE: u64 = 4;

/// What a call of `match` or `search` costs per candidate, in node visits:
/// `serde_json_path` compiles the regular expression again for every node
/// it tests.
const REGEX_CALL_COST: u64 = 256;

/// What the scan of an expression found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Deepest nesting seen.
    pub(crate) nesting: usize,
    /// Descendant segments (`..`).
    pub(crate) descendants: u64,
    /// The product of the selector counts of every bracketed selection.
    pub(crate) selector_product: u64,
    /// Queries (`@`, `$`) inside filters: each runs once per candidate.
    pub(crate) filter_queries: u64,
    /// Absolute queries inside filters that are not singular (`$..x`,
    /// `$[*]`): each visits up to the whole document per candidate.
    pub(crate) wide_absolute_queries: u64,
    /// Calls of `match` and `search`.
    pub(crate) regex_calls: u64,
}

/// Why an expression was refused before parsing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Longer than [`MAX_JSONPATH_CHARS`].
    TooLong,
    /// Nested deeper than [`MAX_JSONPATH_NESTING`]; `at` is the character
    /// index where the limit was passed.
    TooDeep {
        /// Character index of the bracket or operator that passed it.
        at: usize,
    },
}

impl Refusal {
    /// What went wrong and what to do, for an error message.
    pub(crate) fn explain(&self) -> String {
        match self {
            Refusal::TooLong => format!(
                "the expression is longer than {MAX_JSONPATH_CHARS} characters; select with a shorter path"
            ),
            Refusal::TooDeep { at } => format!(
                "the expression nests brackets, parentheses and filter or not operators more than {MAX_JSONPATH_NESTING} deep (at character {at}); flatten the filter"
            ),
        }
    }
}

/// One open bracket or parenthesis.
struct Frame {
    bracket: bool,
    /// `?` and `!` operators opened inside it (closed with it).
    operators: usize,
    /// Commas directly inside a bracket: selectors - 1.
    commas: u64,
    /// A `?` directly inside this bracket: it is a filter selector.
    filter: bool,
}

/// Scans `expression` for its nesting and shape, refusing it when it is
/// longer than [`MAX_JSONPATH_CHARS`] or nests deeper than
/// [`MAX_JSONPATH_NESTING`]. Does not validate the grammar: the parser
/// does that afterwards, on text this scan has bounded.
pub(crate) fn scan(expression: &str) -> Result<Shape, Refusal> {
    if expression.chars().nth(MAX_JSONPATH_CHARS).is_some() {
        return Err(Refusal::TooLong);
    }
    let chars: Vec<char> = expression.chars().collect();
    let mut shape = Shape {
        nesting: 0,
        descendants: 0,
        selector_product: 1,
        filter_queries: 0,
        wide_absolute_queries: 0,
        regex_calls: 0,
    };
    let mut stack: Vec<Frame> = Vec::with_capacity(MAX_JSONPATH_NESTING);
    let mut depth = 0usize;
    let mut index = 0usize;
    let deeper = |depth: &mut usize, shape: &mut Shape, at: usize| {
        *depth += 1;
        shape.nesting = shape.nesting.max(*depth);
        if *depth > MAX_JSONPATH_NESTING {
            Err(Refusal::TooDeep { at })
        } else {
            Ok(())
        }
    };
    while let Some(&current) = chars.get(index) {
        let next = chars.get(index + 1).copied();
        match current {
            '\'' | '"' => {
                index = skip_string(&chars, index);
                continue;
            }
            '[' | '(' => {
                deeper(&mut depth, &mut shape, index)?;
                stack.push(Frame {
                    bracket: current == '[',
                    operators: 0,
                    commas: 0,
                    filter: false,
                });
            }
            ']' | ')' => {
                if let Some(frame) = stack.pop() {
                    depth = depth.saturating_sub(1 + frame.operators);
                    if frame.bracket {
                        shape.selector_product = shape
                            .selector_product
                            .saturating_mul(frame.commas.saturating_add(1));
                    }
                }
            }
            ',' => {
                if let Some(frame) = stack.last_mut() {
                    frame.commas = frame.commas.saturating_add(1);
                }
            }
            '!' if next == Some('=') => {
                index += 2;
                continue;
            }
            '?' | '!' => {
                deeper(&mut depth, &mut shape, index)?;
                // An operator outside any bracket is a syntax error the
                // parser reports; it still counts towards the nesting.
                if let Some(frame) = stack.last_mut() {
                    frame.operators += 1;
                    if current == '?' && frame.bracket {
                        frame.filter = true;
                    }
                }
            }
            '.' if next == Some('.') => {
                shape.descendants = shape.descendants.saturating_add(1);
                index += 2;
                continue;
            }
            '@' | '$' if in_filter(&stack) => {
                shape.filter_queries = shape.filter_queries.saturating_add(1);
                if current == '$' && !singular_after(&chars, index + 1) {
                    shape.wide_absolute_queries = shape.wide_absolute_queries.saturating_add(1);
                }
            }
            letter if letter.is_ascii_alphabetic() => {
                let start = index;
                while chars
                    .get(index)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                {
                    index += 1;
                }
                let name: String = chars.get(start..index).unwrap_or_default().iter().collect();
                if chars.get(index) == Some(&'(') && matches!(name.as_str(), "match" | "search") {
                    shape.regex_calls = shape.regex_calls.saturating_add(1);
                }
                continue;
            }
            _ => {}
        }
        index += 1;
    }
    Ok(shape)
}

/// Whether an open bracket is a filter selector.
fn in_filter(stack: &[Frame]) -> bool {
    stack.iter().any(|frame| frame.filter)
}

/// The index after the string literal that opens at `start` (or the end of
/// the text when it is not closed).
fn skip_string(chars: &[char], start: usize) -> usize {
    let Some(&quote) = chars.get(start) else {
        return chars.len();
    };
    let mut index = start + 1;
    while let Some(&current) = chars.get(index) {
        if current == '\\' {
            index += 2;
        } else if current == quote {
            return index + 1;
        } else {
            index += 1;
        }
    }
    chars.len()
}

/// Whether the query whose root identifier ends at `index` is singular:
/// only `.name`, `['name']` and `[index]` segments follow.
fn singular_after(chars: &[char], mut index: usize) -> bool {
    let blank = |c: &char| matches!(c, ' ' | '\t' | '\n' | '\r');
    loop {
        let mut look = index;
        while chars.get(look).is_some_and(blank) {
            look += 1;
        }
        match chars.get(look) {
            Some('.') => {
                if matches!(chars.get(look + 1), Some('.' | '*')) {
                    return false;
                }
                index = look + 1;
                while chars
                    .get(index)
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_' || !c.is_ascii())
                {
                    index += 1;
                }
            }
            Some('[') => {
                let mut inner = look + 1;
                while chars.get(inner).is_some_and(blank) {
                    inner += 1;
                }
                match chars.get(inner) {
                    Some('\'' | '"') => inner = skip_string(chars, inner),
                    Some(c) if c.is_ascii_digit() || *c == '-' => {
                        inner += 1;
                        while chars.get(inner).is_some_and(char::is_ascii_digit) {
                            inner += 1;
                        }
                    }
                    _ => return false,
                }
                while chars.get(inner).is_some_and(blank) {
                    inner += 1;
                }
                if chars.get(inner) != Some(&']') {
                    return false;
                }
                index = inner + 1;
            }
            _ => return true,
        }
    }
}

/// The size of a parsed document: how many values it holds and how deep it
/// nests. Walked without recursion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DocumentSize {
    /// Values (every scalar, array and object counts one).
    pub(crate) values: u64,
    /// Levels of arrays and objects (a scalar document has depth 0).
    pub(crate) depth: u64,
}

impl DocumentSize {
    /// Measures `document`, keeping one iterator per open level.
    pub(crate) fn of(document: &Value) -> DocumentSize {
        enum Children<'a> {
            Array(std::slice::Iter<'a, Value>),
            Object(serde_json::map::Values<'a>),
        }
        let mut size = DocumentSize {
            values: 0,
            depth: 0,
        };
        let mut open: Vec<Children<'_>> = Vec::new();
        let mut next = Some(document);
        loop {
            if let Some(value) = next.take() {
                size.values = size.values.saturating_add(1);
                match value {
                    Value::Array(items) => open.push(Children::Array(items.iter())),
                    Value::Object(members) => open.push(Children::Object(members.values())),
                    _ => {}
                }
                size.depth = size.depth.max(open.len() as u64);
            }
            let Some(top) = open.last_mut() else {
                return size;
            };
            next = match top {
                Children::Array(items) => items.next(),
                Children::Object(members) => members.next(),
            };
            if next.is_none() {
                open.pop();
            }
        }
    }
}

impl Shape {
    /// An upper bound (saturating) of the node visits evaluating an
    /// expression of this shape costs on a document of `size`: every node
    /// once, times the selector product (duplicates), times the depth for
    /// each descendant segment (`serde_json_path` copies a descendant's
    /// results into its parent's list at every level, and after the first
    /// one a node is listed once per ancestor), times the document for each
    /// non-singular absolute query in a filter, times the work per filter
    /// candidate (its queries, and a regular expression compiled per call).
    pub(crate) fn cost(&self, size: DocumentSize) -> u64 {
        let nodes = size.values.max(1);
        let depth = size.depth.max(1);
        let mut cost = nodes.saturating_mul(self.selector_product.max(1));
        for _ in 0..self.descendants {
            if cost == u64::MAX {
                break;
            }
            cost = cost.saturating_mul(depth);
        }
        for _ in 0..self.wide_absolute_queries {
            if cost == u64::MAX {
                break;
            }
            cost = cost.saturating_mul(nodes);
        }
        let per_candidate = 1u64
            .saturating_add(self.filter_queries)
            .saturating_add(self.regex_calls.saturating_mul(REGEX_CALL_COST));
        cost.saturating_mul(per_candidate)
    }
}

/// Why a value could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// More than `max_bytes` of compact JSON.
    Bytes,
    /// Nested deeper than [`MAX_RESULT_DEPTH`].
    Depth,
}

/// The compact JSON of `nodes`: the node itself when there is one (`single`),
/// an array of them otherwise. Stops at the first byte past `max_bytes`
/// (a string is refused before it is copied when it cannot fit) and at the
/// first level past [`MAX_RESULT_DEPTH`].
pub(crate) fn encode(
    nodes: &[&Value],
    single: bool,
    max_bytes: usize,
) -> Result<Box<RawValue>, Overflow> {
    let mut writer = Writer {
        out: Vec::new(),
        max_bytes,
    };
    match (single, nodes) {
        (true, [node]) => writer.value(node, 0)?,
        _ => {
            writer.byte(b'[')?;
            for (position, node) in nodes.iter().enumerate() {
                if position > 0 {
                    writer.byte(b',')?;
                }
                writer.value(node, 1)?;
            }
            writer.byte(b']')?;
        }
    }
    // The writer produces UTF-8 JSON no deeper than MAX_RESULT_DEPTH + 1
    // levels, which serde_json's reader (128 levels) accepts.
    let text = String::from_utf8(writer.out).map_err(|_| Overflow::Bytes)?;
    RawValue::from_string(text).map_err(|_| Overflow::Depth)
}

/// A bounded byte sink.
struct Writer {
    out: Vec<u8>,
    max_bytes: usize,
}

/// An open array or object being written.
enum Open<'a> {
    Array(std::slice::Iter<'a, Value>, bool),
    Object(serde_json::map::Iter<'a>, bool),
}

impl Writer {
    fn byte(&mut self, byte: u8) -> Result<(), Overflow> {
        if self.out.len() >= self.max_bytes {
            return Err(Overflow::Bytes);
        }
        self.out.push(byte);
        Ok(())
    }

    fn scalar(&mut self, value: &Value) -> Result<(), Overflow> {
        if let Value::String(text) = value {
            // At least its length plus the quotes: refuse before copying.
            if self.out.len().saturating_add(text.len()).saturating_add(2) > self.max_bytes {
                return Err(Overflow::Bytes);
            }
        }
        serde_json::to_writer(&mut self.out, value).map_err(|_| Overflow::Bytes)?;
        if self.out.len() > self.max_bytes {
            return Err(Overflow::Bytes);
        }
        Ok(())
    }

    /// Writes `root`, which sits `base` levels deep in the result.
    fn value(&mut self, root: &Value, base: usize) -> Result<(), Overflow> {
        let mut open: Vec<Open<'_>> = Vec::new();
        let mut next = Some(root);
        loop {
            if let Some(value) = next.take() {
                match value {
                    Value::Array(items) => {
                        if base + open.len() + 1 > MAX_RESULT_DEPTH {
                            return Err(Overflow::Depth);
                        }
                        self.byte(b'[')?;
                        open.push(Open::Array(items.iter(), true));
                    }
                    Value::Object(members) => {
                        if base + open.len() + 1 > MAX_RESULT_DEPTH {
                            return Err(Overflow::Depth);
                        }
                        self.byte(b'{')?;
                        open.push(Open::Object(members.iter(), true));
                    }
                    scalar => self.scalar(scalar)?,
                }
            }
            let Some(top) = open.last_mut() else {
                return Ok(());
            };
            match top {
                Open::Array(items, first) => match items.next() {
                    Some(item) => {
                        if !*first {
                            self.byte(b',')?;
                        }
                        *first = false;
                        next = Some(item);
                    }
                    None => {
                        open.pop();
                        self.byte(b']')?;
                    }
                },
                Open::Object(members, first) => match members.next() {
                    Some((key, item)) => {
                        if !*first {
                            self.byte(b',')?;
                        }
                        *first = false;
                        let key = Value::String(key.clone());
                        self.scalar(&key)?;
                        self.byte(b':')?;
                        next = Some(item);
                    }
                    None => {
                        open.pop();
                        self.byte(b'}')?;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nesting_counts_brackets_parentheses_and_operators_outside_strings() {
        let shape = scan("$[?(@.a == '((((((') && !@.b]").expect("accepted");
        // [ ? ( = 3 at the comparison; after ) the `!` makes [ ? ! = 3.
        assert_eq!(shape.nesting, 3);
        assert_eq!(scan("$.a.b['c']").expect("accepted").nesting, 1);
        assert_eq!(scan("$[?@.a != 1]").expect("accepted").nesting, 2);
    }

    #[test]
    fn the_crash_inputs_are_refused_before_parsing() {
        let parens = format!("$[?{}@.a{}]", "(".repeat(1000), ")".repeat(1000));
        assert!(matches!(scan(&parens), Err(Refusal::TooDeep { .. })));
        let nots = format!("{}@.a{}", "$[?!".repeat(500), "]".repeat(500));
        assert!(matches!(scan(&nots), Err(Refusal::TooDeep { .. })));
        assert_eq!(scan(&"$".repeat(5000)), Err(Refusal::TooLong));
    }

    #[test]
    fn shape_counts_what_multiplies_the_work() {
        let shape = scan("$..a[0,1]..b[?@.x == $.y && match(@.s, 'a.*')]").expect("ok");
        assert_eq!(shape.descendants, 2);
        assert_eq!(shape.selector_product, 2);
        assert_eq!(shape.filter_queries, 3);
        assert_eq!(shape.wide_absolute_queries, 0);
        assert_eq!(shape.regex_calls, 1);
        let wide = scan("$[?count($..*) > 1 && $[*] && $.a['b'][0]]").expect("ok");
        assert_eq!(wide.wide_absolute_queries, 2);
    }

    #[test]
    fn encode_is_compact_json_and_bounded() {
        let document = json!({"b": [1, 2.5, "x\"y"], "a": null});
        let raw = encode(&[&document], true, 1024).expect("fits");
        assert_eq!(raw.get(), serde_json::to_string(&document).expect("json"));
        let both = encode(&[&document, &document], false, 1024).expect("fits");
        assert_eq!(
            both.get(),
            serde_json::to_string(&json!([document, document])).expect("json")
        );
        assert_eq!(encode(&[&document], true, 10).err(), Some(Overflow::Bytes));
        let mut deep = json!(1);
        for _ in 0..MAX_RESULT_DEPTH {
            deep = json!([deep]);
        }
        assert!(encode(&[&deep], true, 1 << 20).is_ok());
        assert_eq!(
            encode(&[&deep], false, 1 << 20).err(),
            Some(Overflow::Depth)
        );
    }
}

#[cfg(test)]
mod stack_tests {
    use super::{MAX_JSONPATH_NESTING, Refusal, scan};

    /// The deepest expressions the scan accepts, of each recursive shape,
    /// and the same one level deeper (refused).
    fn deepest() -> Vec<(String, String)> {
        let n = MAX_JSONPATH_NESTING;
        // `$[?` opens 2 levels; each `(` one more.
        let parens = |k: usize| format!("$[?{}@.a{}]", "(".repeat(k), ")".repeat(k));
        // Each `$[?!` opens 3 levels (bracket, filter, not).
        let nots = |k: usize| format!("{}@.a{}", "$[?!".repeat(k), "]".repeat(k));
        // Each `@[?` opens 2 levels.
        let filters = |k: usize| format!("$[?{}@.a{}]", "@[?".repeat(k), "]".repeat(k));
        // Function arguments: each `length(` opens 1 level.
        let calls = |k: usize| format!("$[?{}@.a{} > 1]", "length(".repeat(k), ")".repeat(k));
        vec![
            (parens(n - 2), parens(n - 1)),
            (nots(n / 3), nots(n / 3 + 1)),
            (filters((n - 2) / 2), filters((n - 2) / 2 + 1)),
            (calls(n - 2), calls(n - 1)),
        ]
    }

    #[test]
    fn the_deepest_accepted_expressions_parse_and_evaluate_in_a_small_stack() {
        let document = serde_json::json!([{"a": [1, {"a": 2}]}, {"a": 3}]);
        for (accepted, refused) in deepest() {
            let shape = scan(&accepted).unwrap_or_else(|error| panic!("{accepted}: {error:?}"));
            assert!(shape.nesting <= MAX_JSONPATH_NESTING, "{accepted}");
            assert!(
                matches!(scan(&refused), Err(Refusal::TooDeep { .. })),
                "{refused} must be refused"
            );
            let document = document.clone();
            // 256 KiB: an eighth of a worker thread's default stack.
            let finished = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || match serde_json_path::JsonPath::parse(&accepted) {
                    Ok(path) => {
                        let _ = path.query(&document).len();
                        true
                    }
                    Err(_) => false,
                })
                .expect("spawn")
                .join()
                .unwrap_or(false);
            assert!(finished, "the deepest expression must parse and evaluate");
        }
    }
}
