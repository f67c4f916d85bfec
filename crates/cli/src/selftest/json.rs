//! A small JSON writer for the report: objects, arrays, strings, numbers, booleans. Written by
//! hand (some 100 lines) rather than with serde_json: the report is write-only, and the
//! static `rverbs` binary keeps no dependency it does not need.

use std::fmt::Write as _;

/// A JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// An unsigned integer (JSON numbers above 2^53 lose precision in some readers: GUIDs
    /// and masks are written as strings).
    UInt(u64),
    Str(String),
    Array(Vec<Json>),
    /// Members in the order given.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// An object from `(key, value)` pairs.
    pub fn obj<K: Into<String>>(members: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Object(members.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// The value as JSON text, indented by two spaces per level, ending without a newline.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        self.write(&mut s, 0);
        s
    }

    fn write(&self, out: &mut String, depth: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::UInt(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Str(s) => escape_into(out, s),
            Json::Array(items) if items.is_empty() => out.push_str("[]"),
            Json::Object(members) if members.is_empty() => out.push_str("{}"),
            Json::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    indent(out, depth + 1);
                    v.write(out, depth + 1);
                }
                out.push('\n');
                indent(out, depth);
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    indent(out, depth + 1);
                    escape_into(out, k);
                    out.push_str(": ");
                    v.write(out, depth + 1);
                }
                out.push('\n');
                indent(out, depth);
                out.push('}');
            }
        }
    }
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// `s` as a JSON string literal: quotes, backslashes and every control character escaped
/// (RFC 8259 section 7); anything else, non-ASCII included, as it is (the text is UTF-8).
pub fn escape_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &str) -> String {
        let mut o = String::new();
        escape_into(&mut o, s);
        o
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(esc("rxe0"), "\"rxe0\"");
        assert_eq!(esc("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(esc("l1\nl2\r\t"), r#""l1\nl2\r\t""#);
        assert_eq!(
            esc("\u{0}\u{1}\u{1f}\u{7f}"),
            r#""\u0000\u0001\u001f\u007f""#
        );
        // Non-ASCII stays as UTF-8 (valid JSON); a lone '/' needs no escape.
        assert_eq!(esc("é→/"), "\"é→/\"");
        assert_eq!(esc(""), "\"\"");
    }

    #[test]
    fn a_hostile_device_name_cannot_break_out_of_its_string() {
        let name = "x\", \"fail\": 0, \"y\": \"\n}";
        let j = Json::obj([("device", Json::str(name)), ("fail", Json::UInt(1))]);
        let t = j.to_text();
        // Exactly one member called "fail", and the name comes back whole.
        assert_eq!(t.matches("\n  \"fail\": ").count(), 1, "{t}");
        assert!(t.contains(r#""x\", \"fail\": 0, \"y\": \"\n}""#), "{t}");
    }

    #[test]
    fn layout() {
        let j = Json::obj([
            ("a", Json::UInt(1)),
            ("b", Json::Array(vec![Json::Bool(true), Json::Null])),
            ("c", Json::obj::<&str>([])),
            ("d", Json::Array(vec![])),
        ]);
        assert_eq!(
            j.to_text(),
            "{\n  \"a\": 1,\n  \"b\": [\n    true,\n    null\n  ],\n  \"c\": {},\n  \"d\": []\n}"
        );
    }
}
