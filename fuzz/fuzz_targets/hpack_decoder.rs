//! The HPACK decoder on arbitrary header blocks (issue 54), one connection's table across
//! them: it never panics, the table stays within the size weir advertised, and no more than
//! the header list bound is handed over, whatever the block expands to.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_h2::hpack::{Decoder, Sink};

struct Count(usize);

impl Sink for Count {
    fn field(&mut self, n: &[u8], v: &[u8], _: bool) -> Result<(), weir_h2::hpack::HpackError> {
        self.0 += n.len() + v.len() + 32;
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut d = Decoder::new(4096);
    // The input cut into blocks at 0xfe octets, decoded in order on one table.
    for block in data.split(|b| *b == 0xfe) {
        let mut c = Count(0);
        let _ = d.decode(block, 8192, &mut c);
        assert!(c.0 <= 8192);
        assert!(d.table().size() <= 4096);
    }
});
