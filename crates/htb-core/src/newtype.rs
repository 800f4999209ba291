//! The `u64` newtypes of the core's units ([`Instant`](crate::Instant),
//! [`Duration`](crate::Duration), [`Rate`](crate::Rate)), declared by one macro: each is a
//! transparent `u64` with `ZERO`, `MAX`, a constructor and an accessor in its base unit, so
//! the three cannot drift apart in derives or wire form.

/// Declares `pub struct $name { $field: u64 }` with the derives and serde form every unit
/// shares, `ZERO`, `MAX`, `$from(u64)` and `$as(self) -> u64`; the caller documents each.
macro_rules! u64_newtype {
    (
        $(#[$attr:meta])*
        pub struct $name:ident { $field:ident }
        $(#[$zero_doc:meta])* ZERO;
        $(#[$max_doc:meta])* MAX;
        $(#[$from_doc:meta])* fn $from:ident;
        $(#[$as_doc:meta])* fn $as:ident;
    ) => {
        $(#[$attr])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            serde(transparent)
        )]
        pub struct $name {
            $field: u64,
        }

        impl $name {
            $(#[$zero_doc])*
            pub const ZERO: Self = Self { $field: 0 };
            $(#[$max_doc])*
            pub const MAX: Self = Self { $field: u64::MAX };

            $(#[$from_doc])*
            #[must_use]
            pub const fn $from($field: u64) -> Self {
                Self { $field }
            }

            $(#[$as_doc])*
            #[must_use]
            pub const fn $as(self) -> u64 {
                self.$field
            }
        }
    };
}
