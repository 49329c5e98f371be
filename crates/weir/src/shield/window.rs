//! A client's event counts over the last second, in eight slots of 1/8 s: Tempesta FW's frang
//! keeps the same ring. The sum of the slots is the rate (a sliding second, 125 ms steps) and
//! the current slot is the burst. 24 bytes, no clock of its own: the caller passes the time.

/// Slot length, in milliseconds.
pub const SLOT_MS: u64 = 125;
const SLOTS: usize = 8;

/// Events per slot over the last second.
#[derive(Debug, Default, Clone, Copy)]
pub struct Window {
    /// The slot `counts[slot % 8]` is now (milliseconds / 125).
    slot: u64,
    counts: [u16; SLOTS],
}

/// Which bound an event would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Rate,
    Burst,
}

impl Window {
    /// Moves to the slot of `now_ms`, clearing the slots passed.
    fn roll(&mut self, now_ms: u64) {
        let now = now_ms / SLOT_MS;
        if now <= self.slot {
            return;
        }
        let gap = now - self.slot;
        if gap >= SLOTS as u64 {
            self.counts = [0; SLOTS];
        } else {
            for s in self.slot + 1..=now {
                self.counts[(s % SLOTS as u64) as usize] = 0;
            }
        }
        self.slot = now;
    }

    /// Counts an event at `now_ms` when it passes neither bound (0: none): at most `rate` in
    /// the last second and `burst` in the current 1/8 s. A refused event is not counted.
    pub fn admit(&mut self, now_ms: u64, rate: u32, burst: u32) -> Result<(), Over> {
        self.roll(now_ms);
        let cur = (self.slot % SLOTS as u64) as usize;
        if burst > 0 && u32::from(self.counts[cur]) >= burst {
            return Err(Over::Burst);
        }
        if rate > 0 && self.sum() >= rate {
            return Err(Over::Rate);
        }
        self.counts[cur] = self.counts[cur].saturating_add(1);
        Ok(())
    }

    /// Counts an event at `now_ms` and returns the events of the last second, it included.
    pub fn count(&mut self, now_ms: u64) -> u32 {
        self.roll(now_ms);
        let cur = (self.slot % SLOTS as u64) as usize;
        self.counts[cur] = self.counts[cur].saturating_add(1);
        self.sum()
    }

    fn sum(&self) -> u32 {
        self.counts.iter().map(|c| u32::from(*c)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (time in ms, rate, burst, expected) in order, on one window.
    #[test]
    fn rate_over_a_sliding_second_and_burst_per_eighth() {
        let mut w = Window::default();
        let table: &[(u64, u32, u32, Result<(), Over>)] = &[
            (1000, 3, 2, Ok(())),
            (1010, 3, 2, Ok(())),
            (1020, 3, 2, Err(Over::Burst)),
            // The next slot: the burst is whole again, the rate is not.
            (1130, 3, 2, Ok(())),
            (1140, 3, 2, Err(Over::Rate)),
            // Still within the second of the first two.
            (1990, 3, 2, Err(Over::Rate)),
            // 1000..1125 has slid out: two more fit.
            (2000, 3, 2, Ok(())),
            (2010, 3, 2, Ok(())),
            (2020, 3, 2, Err(Over::Burst)),
            // Long idle: everything forgotten.
            (60_000, 3, 0, Ok(())),
            (60_001, 3, 0, Ok(())),
            (60_002, 3, 0, Ok(())),
            (60_003, 3, 0, Err(Over::Rate)),
            // No limit at all.
            (60_004, 0, 0, Ok(())),
        ];
        for (i, (t, rate, burst, want)) in table.iter().enumerate() {
            assert_eq!(w.admit(*t, *rate, *burst), *want, "row {i} at {t} ms");
        }
    }

    #[test]
    fn refused_events_are_not_counted() {
        let mut w = Window::default();
        assert!(w.admit(0, 2, 0).is_ok());
        assert!(w.admit(1, 2, 0).is_ok());
        for t in 2..500 {
            assert_eq!(w.admit(t, 2, 0), Err(Over::Rate));
        }
        // One second after the two admitted ones, not after the refused ones.
        assert!(w.admit(1000, 2, 0).is_ok());
    }

    #[test]
    fn count_sums_the_last_second() {
        let mut w = Window::default();
        assert_eq!(w.count(0), 1);
        assert_eq!(w.count(500), 2);
        assert_eq!(w.count(999), 3);
        assert_eq!(w.count(1000), 3, "the slot of 0 ms slid out");
        assert_eq!(w.count(1600), 3, "600..1600 holds 999, 1000 and 1600");
    }
}
