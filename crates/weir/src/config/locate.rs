//! Maps a key path (`listeners[0].routes[2].match.path`, the same spelling serde_path_to_error
//! uses) to the line where it appears in the YAML text, so errors found after deserialization, in
//! `validate()`, still point at a line. Built from yaml-rust2's marked event stream because
//! serde_yaml keeps no positions once a value is deserialized.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Key path → 1-based line.
#[derive(Debug, Default)]
pub struct LineIndex {
    lines: HashMap<String, usize>,
}

impl LineIndex {
    pub fn build(text: &str) -> LineIndex {
        let mut b = Builder {
            stack: Vec::new(),
            index: LineIndex::default(),
        };
        let mut parser = Parser::new_from_str(text);
        // A syntax error is reported by serde_yaml with its own position; the index is best effort.
        let _ = parser.load(&mut b, false);
        b.index
    }

    /// The line of `path`, or of its nearest ancestor that has one.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }
}

enum Frame {
    Map { key: Option<String> },
    Seq { index: usize },
}

struct Builder {
    stack: Vec<Frame>,
    index: LineIndex,
}

impl Builder {
    fn path(&self) -> String {
        let mut s = String::new();
        for f in &self.stack {
            match f {
                Frame::Map { key: Some(k) } => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(k);
                }
                Frame::Map { key: None } => {}
                Frame::Seq { index } => s.push_str(&format!("[{index}]")),
            }
        }
        s
    }

    fn record(&mut self, line: usize) {
        let p = self.path();
        self.index.lines.entry(p).or_insert(line);
    }

    fn value_done(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Map { key }) => *key = None,
            Some(Frame::Seq { index }) => *index += 1,
            None => {}
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::Scalar(v, ..) => {
                if let Some(Frame::Map { key }) = self.stack.last_mut() {
                    if key.is_none() {
                        *key = Some(v);
                        self.record(line);
                        return;
                    }
                }
                self.record(line);
                self.value_done();
            }
            Event::MappingStart(..) => {
                self.record(line);
                self.stack.push(Frame::Map { key: None });
            }
            Event::SequenceStart(..) => {
                self.record(line);
                self.stack.push(Frame::Seq { index: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                self.value_done();
            }
            Event::Alias(_) => self.value_done(),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_paths() {
        let text = "workers: 1\nlisteners:\n  - address: a\n    routes:\n      - match:\n          path: /x\n        echo: {}\n";
        let idx = LineIndex::build(text);
        assert_eq!(idx.line_of("workers"), Some(1));
        assert_eq!(idx.line_of("listeners[0].address"), Some(3));
        assert_eq!(idx.line_of("listeners[0].routes[0].match.path"), Some(6));
        assert_eq!(idx.line_of("listeners[0].routes[0].echo"), Some(7));
        assert_eq!(idx.line_of("listeners[0].routes[0].match.nothing"), Some(5));
    }
}
