//! Flow control (RFC 9113 §5.2, §6.9): the windows of a connection and of each stream, one for
//! what this side may send and one for what it lets the peer send.
//!
//! A send window shrinks as DATA goes out and grows by the peer's WINDOW_UPDATEs; a change of
//! the peer's SETTINGS_INITIAL_WINDOW_SIZE moves every stream's window by the difference, which
//! may leave it negative (§6.9.2). A receive window shrinks as DATA arrives (padding included)
//! and is given back in WINDOW_UPDATEs once the application has taken half of it, so a slow
//! reader holds the peer to the window and never more (the slow-reader defence: memory per
//! stream bounded by what weir advertised).

use crate::frame::MAX_WINDOW;
use crate::Reason;

/// RFC 9113's default initial window (§6.5.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

/// What this side may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWindow {
    /// May be negative after the peer lowered SETTINGS_INITIAL_WINDOW_SIZE.
    avail: i64,
}

impl SendWindow {
    pub fn new(initial: u32) -> SendWindow {
        SendWindow {
            avail: i64::from(initial),
        }
    }

    /// Octets this side may send now.
    pub fn available(&self) -> usize {
        usize::try_from(self.avail.max(0)).unwrap_or(0)
    }

    /// Takes up to `want` octets of the window; the octets taken.
    pub fn take(&mut self, want: usize) -> usize {
        let n = want.min(self.available());
        self.avail -= n as i64;
        n
    }

    /// The peer's WINDOW_UPDATE of `increment`: 0 is a PROTOCOL_ERROR (§6.9), a window past
    /// 2^31-1 a FLOW_CONTROL_ERROR (§6.9.1); the caller says whether of the stream or the
    /// connection.
    pub fn credit(&mut self, increment: u32) -> Result<(), Reason> {
        if increment == 0 {
            return Err(Reason::ProtocolError);
        }
        let next = self.avail + i64::from(increment);
        if next > i64::from(MAX_WINDOW) {
            return Err(Reason::FlowControlError);
        }
        self.avail = next;
        Ok(())
    }

    /// The peer changed SETTINGS_INITIAL_WINDOW_SIZE from `old` to `new` (§6.9.2): a stream's
    /// window moves by the difference; past 2^31-1 is a connection FLOW_CONTROL_ERROR.
    pub fn resize(&mut self, old: u32, new: u32) -> Result<(), Reason> {
        let next = self.avail + i64::from(new) - i64::from(old);
        if next > i64::from(MAX_WINDOW) {
            return Err(Reason::FlowControlError);
        }
        self.avail = next;
        Ok(())
    }
}

/// What this side lets the peer send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWindow {
    /// What the peer may still send.
    avail: u32,
    /// The window this side keeps open (what it advertised).
    size: u32,
    /// Octets received and taken by the application, not yet given back.
    taken: u32,
}

impl RecvWindow {
    /// A window of `size` (as advertised: the initial window, or 65,535 for the connection
    /// before any WINDOW_UPDATE).
    pub fn new(size: u32) -> RecvWindow {
        RecvWindow {
            avail: size,
            size,
            taken: 0,
        }
    }

    /// DATA of `flow` octets (padding included) arrived: more than the window is a
    /// FLOW_CONTROL_ERROR (§6.9.1).
    pub fn receive(&mut self, flow: u32) -> Result<(), Reason> {
        self.avail = self
            .avail
            .checked_sub(flow)
            .ok_or(Reason::FlowControlError)?;
        Ok(())
    }

    /// The application took `n` octets (a frame's padding counts as taken at once): the
    /// increment to send in a WINDOW_UPDATE once half the window waits to be given back.
    pub fn taken(&mut self, n: u32) -> Option<u32> {
        self.taken = self.taken.saturating_add(n);
        if self.taken < self.size / 2 {
            return None;
        }
        let inc = self.taken;
        self.taken = 0;
        self.avail = self.avail.saturating_add(inc).min(MAX_WINDOW);
        Some(inc)
    }

    /// What the peer may still send.
    pub fn available(&self) -> u32 {
        self.avail
    }

    /// Lets the peer send `n` octets more than the window (a WINDOW_UPDATE the caller writes
    /// on its own account); `false` when that would pass 2^31-1.
    pub fn grant(&mut self, n: u32) -> bool {
        match self.avail.checked_add(n) {
            Some(v) if v <= MAX_WINDOW => {
                self.avail = v;
                true
            }
            _ => false,
        }
    }

    /// This side's SETTINGS_INITIAL_WINDOW_SIZE changed (acknowledged by the peer): the
    /// stream's window moves by the difference (§6.9.2), none below zero here.
    pub fn resize(&mut self, new: u32) {
        let grown = i64::from(self.avail) + i64::from(new) - i64::from(self.size);
        self.avail = u32::try_from(grown.clamp(0, i64::from(MAX_WINDOW))).unwrap_or(0);
        self.size = new;
    }
}

/// SETTINGS_INITIAL_WINDOW_SIZE as the peer may set it: past 2^31-1 is a connection
/// FLOW_CONTROL_ERROR (§6.5.2).
pub fn check_initial_window(v: u32) -> Result<u32, Reason> {
    if v > MAX_WINDOW {
        return Err(Reason::FlowControlError);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sending_takes_the_window_and_updates_give_it_back() {
        let mut w = SendWindow::new(DEFAULT_WINDOW);
        assert_eq!(w.take(100_000), 65_535);
        assert_eq!(w.take(1), 0);
        w.credit(10).unwrap();
        assert_eq!(w.available(), 10);
    }

    /// h2spec 6.9/2 and 6.9.1/2, 6.9.1/3: a zero increment, and a window past 2^31-1.
    #[test]
    fn updates_the_rfc_refuses() {
        let mut w = SendWindow::new(DEFAULT_WINDOW);
        assert_eq!(w.credit(0), Err(Reason::ProtocolError));
        assert_eq!(w.credit(MAX_WINDOW), Err(Reason::FlowControlError));
        let mut w = SendWindow::new(1);
        assert!(w.credit(MAX_WINDOW - 1).is_ok());
        assert_eq!(w.credit(1), Err(Reason::FlowControlError));
        assert_eq!(
            check_initial_window(MAX_WINDOW + 1),
            Err(Reason::FlowControlError)
        );
        assert_eq!(check_initial_window(MAX_WINDOW), Ok(MAX_WINDOW));
    }

    /// §6.9.2: a smaller initial window can leave a stream's window negative; it sends nothing
    /// until updates bring it back above zero.
    #[test]
    fn a_lowered_initial_window_can_go_negative() {
        let mut w = SendWindow::new(DEFAULT_WINDOW);
        assert_eq!(w.take(60_000), 60_000);
        w.resize(DEFAULT_WINDOW, 1_000).unwrap();
        assert_eq!(w.available(), 0);
        w.credit(58_000).unwrap();
        assert_eq!(w.available(), 0, "still 1,000 below zero");
        w.credit(4_465).unwrap();
        assert_eq!(w.available(), 3_465);
        let mut w = SendWindow::new(MAX_WINDOW - 10);
        assert_eq!(
            w.resize(DEFAULT_WINDOW, DEFAULT_WINDOW + 11),
            Err(Reason::FlowControlError)
        );
    }

    /// A peer that sends past the window is a FLOW_CONTROL_ERROR; a reader that takes nothing
    /// gives nothing back, so the peer can never send more than the window.
    #[test]
    fn the_peer_is_held_to_the_window() {
        let mut w = RecvWindow::new(1_000);
        w.receive(600).unwrap();
        assert_eq!(w.receive(401), Err(Reason::FlowControlError));
        w.receive(400).unwrap();
        assert_eq!(w.available(), 0);
        // The application took 400: under half, nothing given back yet.
        assert_eq!(w.taken(400), None);
        assert_eq!(w.taken(100), Some(500));
        assert_eq!(w.available(), 500);
        w.resize(2_000);
        assert_eq!(w.available(), 1_500);
    }
}
