//! What a filter implements and what it needs, as two bit sets: [`Phases`], the hooks of
//! [`super::Filter`] the chain calls on it, and [`Caps`], what the pipeline sets up for it
//! (a state slot, a fetcher) or checks (a proxy action). Kept apart so that neither runs out:
//! `Phases` is a `u16` with 9 bits used (a phase is a new hook, rare; the request context
//! carries these bits and every in-flight request pays for its size: a `u32` would grow it by
//! 8 bytes), `Caps` a `u32` with 6. A bit past the width is a compile error (the shift
//! overflows), and widening is the one word. A test is one AND, as with the plain integer
//! they replace.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

/// The operations both sets have.
macro_rules! bit_set {
    ($set:ident, $($flag:ident),* $(,)?) => {
        impl $set {
            /// No bit.
            pub const NONE: $set = $set(0);
            /// Each bit with its name, for `Debug`.
            const NAMES: &'static [($set, &'static str)] = &[$(($set::$flag, stringify!($flag))),*];

            /// Whether any bit of `other` is set (one AND).
            #[inline(always)]
            pub const fn has(self, other: $set) -> bool {
                self.0 & other.0 != 0
            }

            /// Both sets' bits.
            #[inline(always)]
            pub const fn union(self, other: $set) -> $set {
                $set(self.0 | other.0)
            }

            /// Whether no bit is set.
            #[inline(always)]
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
        }

        impl BitOr for $set {
            type Output = $set;
            #[inline(always)]
            fn bitor(self, other: $set) -> $set {
                self.union(other)
            }
        }

        impl BitOrAssign for $set {
            #[inline(always)]
            fn bitor_assign(&mut self, other: $set) {
                *self = self.union(other);
            }
        }

        impl fmt::Debug for $set {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let names = $set::NAMES.iter().filter(|(b, _)| self.has(*b)).map(|(_, n)| n);
                write!(f, "{}(", stringify!($set))?;
                for (i, n) in names.enumerate() {
                    write!(f, "{}{n}", if i == 0 { "" } else { " | " })?;
                }
                f.write_str(")")
            }
        }
    };
}

/// The hooks of [`super::Filter`] a filter implements ([`super::Filter::phases`]), in the
/// order a request meets them. A [`super::Chain`] keeps their union: a route whose filters do
/// not use a phase skips it with one test.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Phases(u16);

impl Phases {
    /// [`super::Filter::request`]: before the cache lookup and the action.
    pub const REQUEST: Phases = Phases(1);
    /// [`super::Filter::upstream_fields`]: fields added to the upstream request.
    pub const UPSTREAM: Phases = Phases(1 << 1);
    /// [`super::Filter::drops_upstream`]: fields of the client's request left out upstream.
    pub const DROPS_UPSTREAM: Phases = Phases(1 << 2);
    /// [`super::Filter::drops_arg`]: query parameters left out of the upstream target.
    pub const DROPS_ARG: Phases = Phases(1 << 3);
    /// [`super::Filter::tee`]: sees the bytes of the upstream request as they are written.
    pub const TEE: Phases = Phases(1 << 4);
    /// [`super::Filter::before_store`]: may keep an upstream response out of the cache.
    pub const BEFORE_STORE: Phases = Phases(1 << 5);
    /// [`super::Filter::response`]: every answer of the route.
    pub const RESPONSE: Phases = Phases(1 << 6);
    /// [`super::Filter::body`]: transforms response bodies. A filter that will transform a
    /// response says so in its response phase by putting state in its slot (and setting the
    /// reply's framing: the length changes).
    pub const BODY: Phases = Phases(1 << 7);
    /// [`super::Filter::log`]: after the response.
    pub const LOG: Phases = Phases(1 << 8);
}

bit_set!(
    Phases,
    REQUEST,
    UPSTREAM,
    DROPS_UPSTREAM,
    DROPS_ARG,
    TEE,
    BEFORE_STORE,
    RESPONSE,
    BODY,
    LOG,
);

/// What a filter does or needs beyond its hooks ([`super::Filter::caps`]): the pipeline sets
/// up for it (a state slot, a fetcher, the run that carries a choice) or checks the route.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Caps(u32);

impl Caps {
    /// Keeps per-request state: its hooks get the filter's [`super::State`] slot.
    pub const STATE: Caps = Caps(1);
    /// Chooses the upstream (traffic split, canary, a breaker's fallback): needs a proxy
    /// action (`compile::check_chain`).
    pub const UPSTREAM_CHOICE: Caps = Caps(1 << 1);
    /// Prefers a server of the upstream ([`super::Filter::prefer`]) and hears which one
    /// answered ([`super::Filter::served`]): sticky sessions.
    pub const SERVER_CHOICE: Caps = Caps(1 << 2);
    /// May send requests of its own through an upstream ([`super::Fetcher`]): the request
    /// phase gets one in [`super::Req::fetch`].
    pub const FETCH: Caps = Caps(1 << 3);
    /// Says who the client is ([`super::Flow::Authenticated`]): the request keeps its run.
    pub const IDENTITY: Caps = Caps(1 << 4);
    /// Compresses responses ([`super::Filter::compression`]): a cache keeps a variant per
    /// coding.
    pub const ENCODES: Caps = Caps(1 << 5);
}

bit_set!(
    Caps,
    STATE,
    UPSTREAM_CHOICE,
    SERVER_CHOICE,
    FETCH,
    IDENTITY,
    ENCODES,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_distinct_and_debug_names_them() {
        let all = Phases::NAMES.iter().fold(Phases::NONE, |a, (b, _)| {
            assert!(!a.has(*b), "{b:?} shares a bit");
            a | *b
        });
        assert_eq!(all.0.count_ones() as usize, Phases::NAMES.len());
        let caps = Caps::NAMES.iter().fold(Caps::NONE, |a, (b, _)| {
            assert!(!a.has(*b), "{b:?} shares a bit");
            a | *b
        });
        assert_eq!(caps.0.count_ones() as usize, Caps::NAMES.len());
        assert_eq!(
            format!("{:?}", Phases::REQUEST | Phases::LOG),
            "Phases(REQUEST | LOG)"
        );
        assert_eq!(format!("{:?}", Caps::NONE), "Caps()");
        assert!((Caps::STATE | Caps::FETCH).has(Caps::FETCH | Caps::IDENTITY));
        assert!(!Caps::STATE.has(Caps::FETCH));
    }
}
