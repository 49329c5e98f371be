//! HPACK's tables (RFC 7541 §2.3): the static table of Appendix A and the dynamic table, a
//! FIFO whose size is the sum of its entries' sizes (name + value + 32 octets each, §4.1),
//! evicting the oldest entries to stay within its maximum (§4.4).

use std::collections::VecDeque;

/// RFC 7541 Appendix A.
pub const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// Octets an entry counts for besides its name and value (RFC 7541 §4.1).
pub const ENTRY_OVERHEAD: usize = 32;

/// The static entries (0-based) whose name is `len` octets long: a name is compared with a
/// handful of entries, not all 61 (the response encoder looks up every field it writes).
fn by_length(len: usize) -> &'static [u8] {
    match len {
        3 => &[20, 59],
        4 => &[32, 33, 36, 37, 44, 58],
        5 => &[3, 4, 21, 49],
        6 => &[18, 31, 34, 53],
        7 => &[1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 35, 50, 51],
        8 => &[38, 41, 45],
        10 => &[0, 54, 57],
        11 => &[52],
        12 => &[30, 46],
        13 => &[17, 22, 23, 29, 40, 43],
        14 => &[14, 27],
        15 => &[15, 16],
        16 => &[25, 26, 28, 60],
        17 => &[39, 56],
        18 => &[47],
        19 => &[24, 42, 48],
        25 => &[55],
        27 => &[19],
        _ => &[],
    }
}

/// The static table's index (1-based) of `name` with `value`, else of `name` alone: `(index,
/// whether the value matched too)`.
pub fn find_static(name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
    let mut by_name = None;
    for &i in by_length(name.len()) {
        let (n, v) = STATIC[usize::from(i)];
        if n == name {
            if v == value {
                return Some((usize::from(i) + 1, true));
            }
            by_name.get_or_insert((usize::from(i) + 1, false));
        }
    }
    by_name
}

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The dynamic table of one direction of one connection.
#[derive(Debug, Default)]
pub struct Dynamic {
    /// Newest first: HPACK's index 62 is `entries[0]`.
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl Dynamic {
    pub fn new(max: usize) -> Dynamic {
        Dynamic {
            entries: VecDeque::new(),
            size: 0,
            max,
        }
    }

    /// The sum of its entries' sizes.
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A new maximum (a size update, §6.3): entries are evicted to fit it.
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    /// Adds an entry (§4.4): the oldest are evicted to make room; one larger than the maximum
    /// empties the table and is not added.
    pub fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        self.entries.push_front((name.into(), value.into()));
        self.size += size;
    }

    /// Entry `index` of the whole address space (1-based: 1..=61 static, 62.. dynamic).
    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        match index {
            0 => None,
            1..=61 => Some(STATIC[index - 1]),
            _ => self.entries.get(index - 62).map(|(n, v)| (&n[..], &v[..])),
        }
    }

    /// Frees what it holds (an idle connection's table keeps its entries; this is for a
    /// connection that ends).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.size = 0;
    }

    fn evict_to(&mut self, room: usize) {
        while self.size > room {
            let Some((n, v)) = self.entries.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_static_table_is_the_rfc_s() {
        assert_eq!(STATIC[0].0, b":authority");
        assert_eq!(STATIC[60].0, b"www-authenticate");
        assert_eq!(find_static(b":method", b"POST"), Some((3, true)));
        assert_eq!(find_static(b":status", b"418"), Some((8, false)));
        assert_eq!(find_static(b"x-nope", b""), None);
    }

    #[test]
    fn entries_are_evicted_oldest_first_to_fit() {
        let mut t = Dynamic::new(100);
        t.insert(b"a", b"1"); // 34
        t.insert(b"b", b"2"); // 68
        assert_eq!(t.get(62), Some((&b"b"[..], &b"2"[..])));
        assert_eq!(t.get(63), Some((&b"a"[..], &b"1"[..])));
        t.insert(b"c", b"3"); // 102 > 100: "a" goes
        assert_eq!(t.len(), 2);
        assert_eq!(t.size(), 68);
        assert_eq!(t.get(64), None);
        t.set_max(40);
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(62), Some((&b"c"[..], &b"3"[..])));
        // Larger than the maximum: the table empties.
        t.insert(b"long-name", &[b'x'; 64]);
        assert!(t.is_empty());
        assert_eq!(t.size(), 0);
        assert_eq!(t.get(0), None);
    }
}
