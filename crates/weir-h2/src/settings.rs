//! SETTINGS (RFC 9113 §6.5): what each side allows the other, the values the peer may send
//! checked as §6.5.2 says, and the frame weir sends at the start of a connection.

use crate::frame::{self, setting, DEFAULT_MAX_FRAME, MAX_FRAME_CEILING, MAX_WINDOW};
use crate::Reason;

/// The parameters one side sets for the other (RFC 9113's defaults until changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub header_table_size: u32,
    pub enable_push: bool,
    /// `None`: unlimited (no value sent).
    pub max_concurrent_streams: Option<u32>,
    pub initial_window_size: u32,
    pub max_frame_size: u32,
    /// `None`: unlimited (no value sent).
    pub max_header_list_size: Option<u32>,
    /// RFC 8441's extended CONNECT (WebSockets over HTTP/2).
    pub enable_connect_protocol: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            header_table_size: 4_096,
            enable_push: true,
            max_concurrent_streams: None,
            initial_window_size: crate::flow::DEFAULT_WINDOW,
            max_frame_size: DEFAULT_MAX_FRAME,
            max_header_list_size: None,
            enable_connect_protocol: false,
        }
    }
}

impl Settings {
    /// The peer's SETTINGS frame (`params`, six octets each) applied; a value §6.5.2 forbids
    /// is a connection error: ENABLE_PUSH other than 0 or 1, MAX_FRAME_SIZE outside
    /// 16,384..=16,777,215 (PROTOCOL_ERROR), INITIAL_WINDOW_SIZE over 2^31-1
    /// (FLOW_CONTROL_ERROR). Unknown settings are ignored (§6.5.2). The previous initial
    /// window, for the streams' windows to move by the difference (§6.9.2).
    pub fn apply(&mut self, params: &[u8]) -> Result<u32, Reason> {
        let old_window = self.initial_window_size;
        let mut next = *self;
        for (id, v) in frame::settings(params) {
            match id {
                setting::HEADER_TABLE_SIZE => next.header_table_size = v,
                setting::ENABLE_PUSH => {
                    next.enable_push = match v {
                        0 => false,
                        1 => true,
                        _ => return Err(Reason::ProtocolError),
                    }
                }
                setting::MAX_CONCURRENT_STREAMS => next.max_concurrent_streams = Some(v),
                setting::INITIAL_WINDOW_SIZE => {
                    next.initial_window_size = crate::flow::check_initial_window(v)?
                }
                setting::MAX_FRAME_SIZE => {
                    if !(DEFAULT_MAX_FRAME..=MAX_FRAME_CEILING).contains(&v) {
                        return Err(Reason::ProtocolError);
                    }
                    next.max_frame_size = v;
                }
                setting::MAX_HEADER_LIST_SIZE => next.max_header_list_size = Some(v),
                setting::ENABLE_CONNECT_PROTOCOL => {
                    next.enable_connect_protocol = match v {
                        0 => false,
                        1 => true,
                        _ => return Err(Reason::ProtocolError),
                    }
                }
                _ => {}
            }
        }
        debug_assert!(next.initial_window_size <= MAX_WINDOW);
        *self = next;
        Ok(old_window)
    }

    /// The SETTINGS frame that announces these values, each only where it differs from the
    /// protocol's default.
    pub fn put(&self, out: &mut Vec<u8>) {
        let d = Settings::default();
        let mut params: Vec<(u16, u32)> = Vec::with_capacity(7);
        if self.header_table_size != d.header_table_size {
            params.push((setting::HEADER_TABLE_SIZE, self.header_table_size));
        }
        if self.enable_push != d.enable_push {
            params.push((setting::ENABLE_PUSH, u32::from(self.enable_push)));
        }
        if let Some(n) = self.max_concurrent_streams {
            params.push((setting::MAX_CONCURRENT_STREAMS, n));
        }
        if self.initial_window_size != d.initial_window_size {
            params.push((setting::INITIAL_WINDOW_SIZE, self.initial_window_size));
        }
        if self.max_frame_size != d.max_frame_size {
            params.push((setting::MAX_FRAME_SIZE, self.max_frame_size));
        }
        if let Some(n) = self.max_header_list_size {
            params.push((setting::MAX_HEADER_LIST_SIZE, n));
        }
        if self.enable_connect_protocol {
            params.push((setting::ENABLE_CONNECT_PROTOCOL, 1));
        }
        frame::put_settings(out, &params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(list: &[(u16, u32)]) -> Vec<u8> {
        list.iter()
            .flat_map(|(id, v)| {
                let mut p = id.to_be_bytes().to_vec();
                p.extend_from_slice(&v.to_be_bytes());
                p
            })
            .collect()
    }

    #[test]
    fn the_peer_s_values_apply_and_unknown_ones_are_ignored() {
        let mut s = Settings::default();
        let old = s
            .apply(&params(&[
                (setting::INITIAL_WINDOW_SIZE, 1_000_000),
                (setting::MAX_FRAME_SIZE, 32_768),
                (setting::ENABLE_PUSH, 0),
                (setting::MAX_CONCURRENT_STREAMS, 100),
                (0xff, 7),
            ]))
            .unwrap();
        assert_eq!(old, 65_535);
        assert_eq!(s.initial_window_size, 1_000_000);
        assert_eq!(s.max_frame_size, 32_768);
        assert!(!s.enable_push);
        assert_eq!(s.max_concurrent_streams, Some(100));
    }

    /// h2spec 6.5.3/1, 6.5.3/2, 6.5.3/3: the values §6.5.2 forbids, and nothing applied from
    /// a frame that holds one.
    #[test]
    fn values_rfc_9113_forbids_are_connection_errors() {
        for (id, v, reason) in [
            (setting::ENABLE_PUSH, 2, Reason::ProtocolError),
            (
                setting::INITIAL_WINDOW_SIZE,
                MAX_WINDOW + 1,
                Reason::FlowControlError,
            ),
            (setting::MAX_FRAME_SIZE, 16_383, Reason::ProtocolError),
            (
                setting::MAX_FRAME_SIZE,
                MAX_FRAME_CEILING + 1,
                Reason::ProtocolError,
            ),
        ] {
            let mut s = Settings::default();
            let frame = params(&[(setting::MAX_CONCURRENT_STREAMS, 1), (id, v)]);
            assert_eq!(s.apply(&frame), Err(reason), "{id} {v}");
            assert_eq!(s, Settings::default(), "nothing applied");
        }
    }

    #[test]
    fn weir_s_frame_sends_only_what_differs() {
        let s = Settings {
            enable_push: false,
            max_concurrent_streams: Some(128),
            initial_window_size: 1 << 20,
            max_header_list_size: Some(65_536),
            ..Settings::default()
        };
        let mut out = Vec::new();
        s.put(&mut out);
        // A 9-octet header and four settings of six octets.
        assert_eq!(out.len(), 9 + 4 * 6);
        let mut back = Settings::default();
        back.apply(&out[9..]).unwrap();
        assert_eq!(back, s);
    }
}
