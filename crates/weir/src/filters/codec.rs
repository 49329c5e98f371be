//! Content codings for the `compress` filter: gzip (`flate2`), brotli (`brotli`, pure Rust) and
//! zstd (`zstd`, the reference C library), whole (a cache variant made once from a stored
//! body) or streamed (a relayed body, piece by piece, output handed on as the encoder makes
//! it, without a flush per piece that would cost ratio).

use std::io::Write;

/// A content coding weir produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl Coding {
    /// The coding of a normalised Accept-Encoding bucket (`weir_cache::key::
    /// normalize_accept_encoding`); `None` for identity.
    pub fn of_bucket(b: &[u8]) -> Option<Coding> {
        match b {
            b"br" => Some(Coding::Br),
            b"zstd" => Some(Coding::Zstd),
            b"gzip" => Some(Coding::Gzip),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The file suffix of a precompressed static file.
    pub fn suffix(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }
}

/// Levels per coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    pub gzip: u32,
    pub br: u32,
    pub zstd: i32,
}

impl Levels {
    fn of(&self, c: Coding) -> i64 {
        match c {
            Coding::Gzip => i64::from(self.gzip),
            Coding::Br => i64::from(self.br),
            Coding::Zstd => i64::from(self.zstd),
        }
    }
}

/// A streaming encoder writing into its own buffer, drained after each piece.
pub enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoder::Gzip(_) => "Encoder(gzip)",
            Encoder::Br(_) => "Encoder(br)",
            Encoder::Zstd(_) => "Encoder(zstd)",
        })
    }
}

impl Encoder {
    pub fn new(c: Coding, levels: &Levels) -> std::io::Result<Encoder> {
        let level = levels.of(c);
        Ok(match c {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level.clamp(1, 9) as u32),
            )),
            Coding::Br => Encoder::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                16 * 1024,
                level.clamp(0, 11) as u32,
                22,
            ))),
            Coding::Zstd => Encoder::Zstd(zstd::stream::write::Encoder::new(
                Vec::new(),
                level.clamp(1, 22) as i32,
            )?),
        })
    }

    fn buffer(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Gzip(e) => e.get_mut(),
            Encoder::Br(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
        }
    }

    /// Feeds `data`; what the encoder has produced so far is appended to `out`.
    pub fn write(&mut self, data: &[u8], out: &mut impl Extend<u8>) -> std::io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.write_all(data)?,
            Encoder::Br(e) => e.write_all(data)?,
            Encoder::Zstd(e) => e.write_all(data)?,
        }
        out.extend(self.buffer().drain(..));
        Ok(())
    }

    /// Ends the stream: the rest goes to `out`.
    pub fn finish(self, out: &mut impl Extend<u8>) -> std::io::Result<()> {
        let rest = match self {
            Encoder::Gzip(e) => e.finish()?,
            Encoder::Br(mut e) => {
                e.flush()?;
                e.into_inner()
            }
            Encoder::Zstd(e) => e.finish()?,
        };
        out.extend(rest);
        Ok(())
    }
}

/// A whole body in coding `c`.
pub fn encode_all(c: Coding, levels: &Levels, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut e = Encoder::new(c, levels)?;
    let mut out = Vec::with_capacity(data.len() / 3 + 64);
    e.write(data, &mut out)?;
    e.finish(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(c: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match c {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::decode_all(data).unwrap(),
        }
        out
    }

    /// Each coding round-trips, whole and in pieces, and shrinks text.
    #[test]
    fn codings_round_trip_whole_and_streamed() {
        let text: Vec<u8> = (0..2000)
            .flat_map(|i| format!("line {i} of some compressible text\n").into_bytes())
            .collect();
        let levels = Levels {
            gzip: 6,
            br: 5,
            zstd: 3,
        };
        for c in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let whole = encode_all(c, &levels, &text).unwrap();
            assert!(whole.len() < text.len() / 4, "{c:?}: {}", whole.len());
            assert_eq!(decode(c, &whole), text, "{c:?}");
            let mut e = Encoder::new(c, &levels).unwrap();
            let mut out = Vec::new();
            for piece in text.chunks(777) {
                e.write(piece, &mut out).unwrap();
            }
            e.finish(&mut out).unwrap();
            assert_eq!(decode(c, &out), text, "{c:?} streamed");
        }
    }
}
