//! `raw_newtype!`: the one way this workspace declares a kernel or
//! device value (a status, an opcode, a state, a port speed) as a newtype with named
//! constants, so that an unknown number stays an unknown number instead of becoming a wrong
//! enum variant.

/// Declares a newtype over a raw kernel or device value with named constants: unknown values
/// stay representable, compare and print as such (never an invalid enum). Each constant may
/// carry a display name (`NAME = value, "name";`) or use its own identifier (`NAME = value;`).
/// Used across the rverbs crates; not part of the public API.
#[doc(hidden)]
#[macro_export]
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

            /// The constant's name, or `None` for a value this crate does not know.
            pub const fn name(self) -> Option<&'static str> {
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
