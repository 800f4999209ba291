//! The macro that declares tc's keyword enums.

/// A public enum of tc keywords: the enum and its keyword table in one place, so neither can
/// gain a variant the other lacks (iproute2 keeps such tables as string arrays beside the
/// kernel's numbers, as `q_cake.c` does). serde writes the variant's kebab-case name.
macro_rules! keyword_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident => $keyword:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            serde(rename_all = "kebab-case")
        )]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// tc's keyword.
            #[must_use]
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $keyword,)+
                }
            }
        }
    };
}
