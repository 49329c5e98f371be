//! RFC 8941 Dictionaries, as much of Structured Field Values as `CDN-Cache-Control` (RFC 9213)
//! needs: members whose values are bare items or inner lists, each with parameters. Parsing
//! follows RFC 8941 §4.2 to the letter, because RFC 9213 says a field that fails to parse is
//! ignored as a whole (and the cache falls back to `Cache-Control`): leniency here would let a
//! malformed `CDN-Cache-Control` override a `no-store`.
//!
//! Written here rather than taken from the `sfv` crate: weir needs one 100-line subset (no
//! serialisation, no decimals' arithmetic, no byte-sequence decoding) over byte slices, and the
//! crate's current release requires a newer compiler than the workspace's `rust-version`.

/// A member's value, reduced to what cache directives are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Integer(i64),
    Decimal,
    String(Vec<u8>),
    Token(Vec<u8>),
    ByteSequence,
    Boolean(bool),
    InnerList,
}

/// Members parsed at most: RFC 8941 §3.2 asks parsers to support 1024; a field with more is
/// treated as invalid (and ignored, as RFC 9213 says of a field that fails to parse).
pub const MAX_MEMBERS: usize = 1024;

/// Parses the combined field lines as one Dictionary: `(key, value)` in order, later duplicates
/// overriding earlier ones as §4.2.2 says. `None`: the field is invalid. Linear in the input:
/// duplicates are removed once at the end (removing them per member was quadratic, 0.37 s of a
/// worker for a 10,500-member field).
pub fn parse_dictionary<'a>(
    lines: impl IntoIterator<Item = &'a [u8]>,
) -> Option<Vec<(Vec<u8>, Value)>> {
    let mut input = Vec::new();
    for (i, l) in lines.into_iter().enumerate() {
        if i > 0 {
            input.extend_from_slice(b", ");
        }
        input.extend_from_slice(l);
    }
    let mut p = Parser { s: &input, i: 0 };
    p.skip_sp();
    let mut out: Vec<(Vec<u8>, Value)> = Vec::new();
    while !p.done() {
        let key = p.key()?;
        let value = if p.eat(b'=') {
            if p.peek() == Some(b'(') {
                p.inner_list()?;
                Value::InnerList
            } else {
                let v = p.bare_item()?;
                p.parameters()?;
                v
            }
        } else {
            p.parameters()?;
            Value::Boolean(true)
        };
        if out.len() == MAX_MEMBERS {
            return None;
        }
        out.push((key, value));
        p.skip_ows();
        if p.done() {
            return Some(last_of_each(out));
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip_ows();
        if p.done() {
            return None; // trailing comma
        }
    }
    // Trailing whitespace only is fine; an empty field is an empty dictionary.
    Some(last_of_each(out))
}

/// Keeps the last member of each key, in the order of those last members.
fn last_of_each(mut members: Vec<(Vec<u8>, Value)>) -> Vec<(Vec<u8>, Value)> {
    let mut seen = std::collections::HashSet::new();
    members.reverse();
    members.retain(|(k, _)| seen.insert(k.clone()));
    members.reverse();
    members
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn done(&self) -> bool {
        self.s[self.i..].iter().all(|b| *b == b' ')
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }
    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
    fn key(&mut self) -> Option<Vec<u8>> {
        let start = self.i;
        match self.peek()? {
            b'a'..=b'z' | b'*' => self.i += 1,
            _ => return None,
        }
        while matches!(
            self.peek(),
            Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')
        ) {
            self.i += 1;
        }
        Some(self.s[start..self.i].to_vec())
    }

    /// `;key[=bare-item]` repeated.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip_sp();
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    fn inner_list(&mut self) -> Option<()> {
        if !self.eat(b'(') {
            return None;
        }
        loop {
            self.skip_sp();
            if self.eat(b')') {
                return self.parameters();
            }
            self.bare_item()?;
            self.parameters()?;
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return None;
            }
        }
    }

    fn bare_item(&mut self) -> Option<Value> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b':' => {
                self.i += 1;
                while matches!(
                    self.peek(),
                    Some(b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=')
                ) {
                    self.i += 1;
                }
                self.eat(b':').then_some(Value::ByteSequence)
            }
            b'?' => {
                self.i += 1;
                match self.peek()? {
                    b'0' => {
                        self.i += 1;
                        Some(Value::Boolean(false))
                    }
                    b'1' => {
                        self.i += 1;
                        Some(Value::Boolean(true))
                    }
                    _ => None,
                }
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'*' => {
                let start = self.i;
                self.i += 1;
                while self
                    .peek()
                    .is_some_and(|b| is_tchar(b) || b == b':' || b == b'/')
                {
                    self.i += 1;
                }
                Some(Value::Token(self.s[start..self.i].to_vec()))
            }
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Value> {
        let negative = self.eat(b'-');
        let start = self.i;
        let mut dot = None;
        while let Some(b) = self.peek() {
            match b {
                b'0'..=b'9' => {}
                b'.' if dot.is_none() => dot = Some(self.i),
                _ => break,
            }
            self.i += 1;
        }
        let digits = &self.s[start..self.i];
        match dot {
            None => {
                if digits.is_empty() || digits.len() > 15 {
                    return None;
                }
                let n: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
                Some(Value::Integer(if negative { -n } else { n }))
            }
            Some(d) => {
                let (int, frac) = (d - start, self.i - d - 1);
                (int > 0 && int <= 12 && (1..=3).contains(&frac)).then_some(Value::Decimal)
            }
        }
    }

    fn string(&mut self) -> Option<Value> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let b = self.peek()?;
            self.i += 1;
            match b {
                b'"' => return Some(Value::String(out)),
                b'\\' => {
                    let e = self.peek()?;
                    if e != b'"' && e != b'\\' {
                        return None;
                    }
                    self.i += 1;
                    out.push(e);
                }
                0x20..=0x7e => out.push(b),
                _ => return None,
            }
        }
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Option<Vec<(Vec<u8>, Value)>> {
        parse_dictionary([s.as_bytes()])
    }

    #[test]
    fn valid_dictionaries() {
        let d =
            p("max-age=60, no-store, private=\"set-cookie\", a=(x y);q=1, b=?0, c=1.5, t=tok/en")
                .unwrap();
        assert_eq!(d[0], (b"max-age".to_vec(), Value::Integer(60)));
        assert_eq!(d[1], (b"no-store".to_vec(), Value::Boolean(true)));
        assert_eq!(d[2].1, Value::String(b"set-cookie".to_vec()));
        assert_eq!(d[3].1, Value::InnerList);
        assert_eq!(d[4].1, Value::Boolean(false));
        assert_eq!(d[5].1, Value::Decimal);
        assert_eq!(d[6].1, Value::Token(b"tok/en".to_vec()));
        assert_eq!(p("").unwrap(), vec![]);
        assert_eq!(p("  a=1  ").unwrap().len(), 1);
        // Later duplicates win.
        assert_eq!(
            p("a=1, a=2").unwrap(),
            vec![(b"a".to_vec(), Value::Integer(2))]
        );
        // Lines are combined.
        assert_eq!(parse_dictionary([&b"a=1"[..], b"b"]).unwrap().len(), 2);
    }

    #[test]
    fn many_members_parse_in_linear_time_and_are_capped() {
        let many = |n: usize| {
            (0..n)
                .map(|i| format!("k{}=1", i % 700))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let d = p(&many(MAX_MEMBERS)).unwrap();
        assert_eq!(d.len(), 700, "duplicates folded, last wins");
        assert_eq!(d[0].0, b"k324", "in the order of the last members");
        assert!(p(&many(MAX_MEMBERS + 1)).is_none());
        assert!(p(&many(10_500)).is_none());
    }

    #[test]
    fn invalid_dictionaries() {
        for bad in [
            "Max-Age=60",
            "max-age=60,",
            "max-age=60,,no-store",
            "max-age=\"60",
            "max-age=6 0",
            "max-age=1234567890123456",
            "a=?2",
            "a=(x",
            "a=1.2345",
            "a=\"\\x\"",
            "no-store;",
            "=1",
            "a=@",
            "max-age=60 no-store",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
    }
}
