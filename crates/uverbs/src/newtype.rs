//! `raw_newtype!`: the one way this workspace declares a kernel or
//! device value (a status, an opcode, a state, a port speed) as a newtype with named
//! constants, so that an unknown number stays an unknown number instead of becoming a wrong
//! enum variant.

/// Declares a newtype over a raw kernel or device value with named constants: unknown values
/// stay representable, compare and print as such (never an invalid enum). Each constant may
/// carry a display name (`NAME = value, "name";`) or use its own identifier (`NAME = value;`).
/// Used across the rverbs crates; not part of the user's API: exported (hidden) only with the
/// feature `internals`, for the crates of this workspace (rverbs-cm, rverbs-provider), as
/// `internal!` is. The `cfg` of its `name` is the calling crate's `internals`.
#[cfg_attr(feature = "internals", macro_export, doc(hidden))]
macro_rules! raw_newtype {
    ($(#[$m:meta])* $name:ident($ty:ty) { $($(#[$cm:meta])* $c:ident = $v:expr;)* }) => {
        $crate::raw_newtype! { $(#[$m])* $name($ty) { $($(#[$cm])* $c = $v, stringify!($c);)* } }
    };
    ($(#[$m:meta])* $name:ident($ty:ty) { $($(#[$cm:meta])* $c:ident = $v:expr, $s:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub $ty);

        impl $name {
            $(
                $(#[$cm])*
                #[doc = ""]
                #[doc = concat!("Raw value `", stringify!($v), "`.")]
                pub const $c: Self = Self($v);
            )*

            /// The constant's name, or `None` for a value this crate does not know (users
            /// print with `Display`; public for the crates of this workspace only, with the
            /// defining crate's feature `internals`).
            #[cfg(feature = "internals")]
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(v if v == $v => Some($s),)*
                    _ => None,
                }
            }

            /// The constant's name, or `None` for a value this crate does not know.
            #[cfg(not(feature = "internals"))]
            #[allow(dead_code)]
            pub(crate) const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(v if v == $v => Some($s),)*
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({:#x})", stringify!($name), self.0),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "unknown {} {} ({:#x})", stringify!($name), self.0, self.0),
                }
            }
        }
    };
}
pub(crate) use raw_newtype;

/// Declares a set of flags over a raw kernel or device number (`ibv_access_flags`,
/// `ibv_send_flags`, ...): named constants, the set operations a user needs (`|`, `&`, `-`,
/// `contains`, `empty`, `bits`), and unknown bits kept as they came. Its `Debug` prints the
/// names: `AccessFlags(LOCAL_WRITE | REMOTE_READ)`, `AccessFlags(0x0)` when empty, unknown bits
/// in hex. The in-place operations the workspace uses are behind `internals`.
macro_rules! flag_set {
    ($(#[$m:meta])* pub struct $name:ident: $ty:ty { $($(#[$cm:meta])* const $c:ident = $v:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name($ty);

        impl $name {
            $($(#[$cm])* pub const $c: Self = Self($v);)*

            const NAMED: &'static [(&'static str, $ty)] = &[$((stringify!($c), $v),)*];

            /// No flag set.
            pub const fn empty() -> Self {
                Self(0)
            }

            /// The raw number.
            pub const fn bits(&self) -> $ty {
                self.0
            }

            /// From a raw number, bits this crate does not name kept.
            pub const fn from_bits_retain(bits: $ty) -> Self {
                Self(bits)
            }

            /// True when every flag of `other` is set.
            pub const fn contains(&self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// True when a flag of `other` is set.
            pub const fn intersects(&self, other: Self) -> bool {
                self.0 & other.0 != 0
            }

            /// True when no flag is set.
            pub const fn is_empty(&self) -> bool {
                self.0 == 0
            }

            /// The flags of both (`|` in a `const`).
            pub const fn union(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }

            internal! {
                /// Every named flag.
                pub const fn all() -> Self {
                    Self(0 $(| $v)*)
                }
            }

            internal! {
                /// From a raw number, bits this crate does not name dropped.
                pub const fn from_bits_truncate(bits: $ty) -> Self {
                    Self(bits & Self::all().0)
                }
            }

            internal! {
                /// The flags of `self` that `other` does not have.
                pub const fn difference(self, other: Self) -> Self {
                    Self(self.0 & !other.0)
                }
            }

            internal! {
                /// The flags of both.
                pub const fn intersection(self, other: Self) -> Self {
                    Self(self.0 & other.0)
                }
            }

            internal! {
                /// Sets the flags of `other`.
                pub fn insert(&mut self, other: Self) {
                    self.0 |= other.0;
                }
            }

            internal! {
                /// Clears the flags of `other`.
                pub fn remove(&mut self, other: Self) {
                    self.0 &= !other.0;
                }
            }

            internal! {
                /// Sets or clears the flags of `other`.
                pub fn set(&mut self, other: Self, value: bool) {
                    if value {
                        self.0 |= other.0;
                    } else {
                        self.0 &= !other.0;
                    }
                }
            }
        }

        impl ::std::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }

        impl ::std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }

        impl ::std::ops::BitAnd for $name {
            type Output = Self;
            fn bitand(self, rhs: Self) -> Self {
                Self(self.0 & rhs.0)
            }
        }

        impl ::std::ops::BitAndAssign for $name {
            fn bitand_assign(&mut self, rhs: Self) {
                self.0 &= rhs.0;
            }
        }

        impl ::std::ops::Sub for $name {
            type Output = Self;
            fn sub(self, rhs: Self) -> Self {
                Self(self.0 & !rhs.0)
            }
        }

        impl ::std::ops::SubAssign for $name {
            fn sub_assign(&mut self, rhs: Self) {
                self.0 &= !rhs.0;
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                if self.0 == 0 {
                    return write!(f, "{:#x})", self.0);
                }
                let mut rest = self.0;
                let mut first = true;
                for &(n, v) in Self::NAMED {
                    if v != 0 && rest & v == v {
                        if !first {
                            f.write_str(" | ")?;
                        }
                        f.write_str(n)?;
                        rest &= !v;
                        first = false;
                    }
                }
                if rest != 0 {
                    if !first {
                        f.write_str(" | ")?;
                    }
                    write!(f, "{:#x}", rest)?;
                }
                f.write_str(")")
            }
        }
    };
}
pub(crate) use flag_set;
