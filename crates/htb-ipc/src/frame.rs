//! Framing: a 4-byte big-endian length, then that many bytes of JSON, at most
//! [`MAX_MESSAGE_BYTES`].

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::MAX_MESSAGE_BYTES;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The peer closed the connection cleanly between frames.
    #[error("connection closed")]
    Closed,
    /// The announced length is above the limit.
    #[error("message of {0} bytes is larger than the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLarge(u32),
    /// The body is not the expected JSON.
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Encodes `message` as one frame.
///
/// # Errors
/// [`FrameError::TooLarge`] if it exceeds [`MAX_MESSAGE_BYTES`].
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    // The body written after room for its length, which is filled in after: a staged batch's
    // 20 MB body is not copied into a second buffer.
    let mut frame = vec![0; 4];
    serde_json::to_writer(&mut frame, message)?;
    let len = u32::try_from(frame.len() - 4)
        .ok()
        .filter(|&n| n <= MAX_MESSAGE_BYTES)
        .ok_or(FrameError::TooLarge(u32::MAX))?;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Ok(frame)
}

/// Checks a frame header: the body length it announces.
///
/// # Errors
/// [`FrameError::TooLarge`].
pub fn body_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header);
    if len > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len as usize)
}

/// Writes `message` as one frame.
///
/// # Errors
/// Encoding or I/O errors.
pub fn write_frame<T: Serialize>(w: &mut impl Write, message: &T) -> Result<(), FrameError> {
    w.write_all(&encode(message)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame and decodes it.
///
/// # Errors
/// [`FrameError::Closed`] at a clean end of stream, else the problem.
pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut body = vec![0u8; body_len(header)?];
    r.read_exact(&mut body)?;
    Ok(serde_json::from_slice(&body)?)
}
