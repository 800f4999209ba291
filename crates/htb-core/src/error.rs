//! Errors of the scheduler's control operations. Enqueue and dequeue never fail: a refused
//! packet comes back in [`Dropped`](crate::Dropped).

use core::fmt;

use crate::class_id::ClassId;

/// Why adding, changing or deleting a class was refused. Nothing changes when one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClassError {
    /// The class id's major is not the scheduler's.
    WrongMajor {
        /// The class id given.
        class: ClassId,
        /// The scheduler's major.
        expected: u16,
    },
    /// Minor 0 is the qdisc itself, not a class.
    QdiscHandle(ClassId),
    /// A class with this id exists already.
    Exists(ClassId),
    /// No class with this id.
    NotFound(ClassId),
    /// The parent does not exist. (The kernel silently makes such a class a root class.)
    ParentNotFound {
        /// The class being added.
        class: ClassId,
        /// The missing parent.
        parent: ClassId,
    },
    /// Adding the class would make the tree deeper than eight levels.
    TooDeep(ClassId),
    /// The class has children; delete them first.
    HasChildren(ClassId),
    /// Only a leaf class holds a queue discipline.
    NotALeaf(ClassId),
    /// `rate` is zero.
    ZeroRate(ClassId),
    /// `ceil` is zero.
    ZeroCeil(ClassId),
    /// `burst` or `cburst` lasts longer than [`MAX_BURST_TIME`](crate::MAX_BURST_TIME).
    BurstTooLarge {
        /// The class.
        class: ClassId,
        /// The burst in bytes.
        bytes: u64,
    },
    /// An explicit quantum above 2^31 - 1 bytes.
    QuantumTooLarge(ClassId),
    /// The scheduler holds as many classes as its arena indices can address.
    TooManyClasses,
}

impl fmt::Display for ClassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongMajor { class, expected } => {
                write!(f, "class {class} does not belong to qdisc {expected:x}:")
            }
            Self::QdiscHandle(id) => write!(f, "{id} is the qdisc handle, not a class id"),
            Self::Exists(id) => write!(f, "class {id} already exists"),
            Self::NotFound(id) => write!(f, "class {id} does not exist"),
            Self::ParentNotFound { class, parent } => {
                write!(f, "parent {parent} of class {class} does not exist")
            }
            Self::TooDeep(id) => write!(f, "class {id} would make the tree deeper than 8 levels"),
            Self::HasChildren(id) => write!(f, "class {id} has children; delete them first"),
            Self::NotALeaf(id) => write!(
                f,
                "class {id} has children: only a leaf class takes a qdisc (htb: Invalid argument)"
            ),
            Self::ZeroRate(id) => write!(f, "class {id}: rate must be above zero"),
            Self::ZeroCeil(id) => write!(f, "class {id}: ceil must be above zero"),
            Self::BurstTooLarge { class, bytes } => {
                write!(
                    f,
                    "class {class}: burst of {bytes} bytes lasts longer than one hour"
                )
            }
            Self::QuantumTooLarge(id) => write!(f, "class {id}: quantum above 2147483647 bytes"),
            Self::TooManyClasses => f.write_str("too many classes"),
        }
    }
}

impl core::error::Error for ClassError {}
