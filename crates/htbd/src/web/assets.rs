//! The console's page and its assets, compiled into htbd (a router has no internet): the
//! page, its script and style sheet, and uPlot 1.6.32 (MIT, `assets/uplot-LICENSE`) for the
//! charts. None of them holds data; the script asks the API for it.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// `(name, content type, bytes)`.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/app.css"),
    ),
    (
        "uplot.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/uplot.min.js"),
    ),
    (
        "uplot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/uplot.min.css"),
    ),
    (
        "uplot-LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("assets/uplot-LICENSE"),
    ),
];

const INDEX: &str = include_str!("assets/index.html");

/// `GET /`: the page (every view of the console is this page; the part after `#` picks it).
pub async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX,
    )
        .into_response()
}

/// `GET /assets/{file}`.
pub async fn file(Path(name): Path<String>) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, kind, bytes)) => (
            [
                (header::CONTENT_TYPE, *kind),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}
