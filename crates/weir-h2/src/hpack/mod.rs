//! HPACK (RFC 7541): [`Decoder`] for what peers send (its dynamic table, bounded), [`Encoder`]
//! for what weir sends (stateless), the Huffman code and the tables.

pub mod decoder;
pub mod encoder;
pub mod huffman;
mod huffman_table;
pub mod table;

pub use decoder::{Decoder, Outcome, Sink};
pub use encoder::Encoder;

/// A header block weir cannot decode: a COMPRESSION_ERROR for the connection (RFC 9113
/// §4.3), but [`HpackError::TooLarge`] from a sink, which refuses the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a field.
    Truncated,
    /// An integer past 32 bits.
    Integer,
    /// Index 0, or past the tables.
    Index,
    /// A table size update over the advertised size, after a field, or a third in a row.
    SizeUpdate,
    /// A Huffman string with EOS, or padding that is not 1-7 one bits.
    Huffman,
    /// A string past the bound its caller gave.
    TooLarge,
}

impl std::fmt::Display for HpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HpackError::Truncated => "header block ends inside a field",
            HpackError::Integer => "HPACK integer past 32 bits",
            HpackError::Index => "HPACK index 0 or past the tables",
            HpackError::SizeUpdate => "HPACK table size update not allowed there or that large",
            HpackError::Huffman => "bad Huffman string (EOS or padding)",
            HpackError::TooLarge => "header field past the limit",
        })
    }
}

impl std::error::Error for HpackError {}
