//! The token a non-loopback listener requires (`[daemon] http_token = "/etc/htbd/http.token"`,
//! a file holding it): requests for data carry `Authorization: Bearer TOKEN` or get 401.
//! Prometheus sends it with `authorization: { credentials_file: … }`; the console's page asks
//! for it once and keeps it in the tab's session storage.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Web;

/// Shortest token accepted: 16 characters of a random source are beyond guessing over HTTP.
pub const MIN_TOKEN_CHARS: usize = 16;

/// A bearer token.
#[derive(Clone)]
pub struct Token(Arc<str>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// Why the token file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// It cannot be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Too short, or characters a header cannot carry.
    #[error(
        "the token in {path} must be at least {MIN_TOKEN_CHARS} printable ASCII characters \
         without spaces (e.g. `head -c 24 /dev/urandom | base64 > {path}`)"
    )]
    Weak {
        /// The file.
        path: String,
    },
}

impl Token {
    /// The token in `path` (its first line, surrounding whitespace removed).
    ///
    /// # Errors
    /// [`TokenError`]: unreadable, or too weak to protect anything.
    pub fn read(path: &Path) -> Result<Self, TokenError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::new(text.lines().next().unwrap_or_default().trim())
            .ok_or(TokenError::Weak { path: shown })
    }

    /// `text` as a token, if strong enough.
    #[must_use]
    pub fn new(text: &str) -> Option<Self> {
        (text.len() >= MIN_TOKEN_CHARS && text.bytes().all(|b| b.is_ascii_graphic()))
            .then(|| Self(text.into()))
    }

    /// Whether `offered` is the token, in time independent of where they differ.
    #[must_use]
    pub fn accepts(&self, offered: &[u8]) -> bool {
        let want = self.0.as_bytes();
        let mut diff = u8::from(want.len() != offered.len());
        for (i, &w) in want.iter().enumerate() {
            diff |= w ^ offered.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }
}

/// Lets a request through when no token is set or it carries the token; 401 otherwise.
pub async fn require(State(web): State<Arc<Web>>, request: Request, next: Next) -> Response {
    let Some(token) = &web.token else {
        return next.run(request).await;
    };
    let offered = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    if offered.is_some_and(|t| token.accepts(t)) {
        return next.run(request).await;
    }
    let why = if offered.is_some() {
        "the token is not this htbd's\n"
    } else {
        "this listener needs a token: send Authorization: Bearer TOKEN (the file named by \
         [daemon] http_token)\n"
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"htbd\"")],
        why,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_is_accepted_and_weak_ones_are_refused() {
        let token = Token::new("0123456789abcdefXYZ").unwrap();
        assert!(token.accepts(b"0123456789abcdefXYZ"));
        assert!(!token.accepts(b"0123456789abcdefXY"));
        assert!(!token.accepts(b"0123456789abcdefXYZ0"));
        assert!(!token.accepts(b"0123456789abcdefXYz"));
        assert!(!token.accepts(b""));
        assert!(Token::new("short").is_none());
        assert!(Token::new("sixteen chars with spaces").is_none());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  0123456789abcdef\nignored\n").unwrap();
        assert!(Token::read(&path).unwrap().accepts(b"0123456789abcdef"));
        std::fs::write(&path, "weak\n").unwrap();
        let e = Token::read(&path).unwrap_err().to_string();
        assert!(e.contains("at least 16"), "{e}");
        let e = Token::read(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot read the token file"), "{e}");
    }
}
