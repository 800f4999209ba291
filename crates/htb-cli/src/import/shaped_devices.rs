//! LibreQoS's `ShapedDevices.csv`: one row per device, devices grouped into circuits by
//! `Circuit ID`. Columns are found by their header names (LibreQoS's order is `Circuit ID,
//! Circuit Name, Device ID, Device Name, Parent Node, MAC, IPv4, IPv6, Download Min Mbps,
//! Upload Min Mbps, Download Max Mbps, Upload Max Mbps, Comment[, sqm]`); `#` starts a comment
//! line; address lists are comma-separated inside one quoted field (`"100.64.0.1, 100.64.0.14"`);
//! rates are Mbps with decimals (LibreQoS 1.5 accepts `0.5`, `2.5`).

use htb_config::filter::IpPrefix;
use htb_core::LeafSpec;

/// Why the file was refused: the line, the column (by header name) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column \"{column}\": {message}")]
pub struct CsvError {
    /// 1-based line in the file.
    pub line: u64,
    /// The column's header name (or `header` for the header row itself).
    pub column: String,
    /// What was wrong.
    pub message: String,
}

/// One device row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapedDevice {
    /// The line it was read from (for errors found later, e.g. duplicate addresses).
    pub line: u64,
    /// `Circuit ID`; devices sharing one share a class. Empty: the device is its own circuit.
    pub circuit_id: String,
    /// `Circuit Name` (free text).
    pub circuit_name: String,
    /// `Device ID`.
    pub device_id: String,
    /// `Device Name` (empty when the file has no such column).
    pub device_name: String,
    /// `MAC`, when given.
    pub mac: Option<htb_ipc::MacAddr>,
    /// `Comment` (free text; an unquoted comma in it is kept).
    pub comment: String,
    /// `Parent Node`: the node (site, access point) the circuit hangs under; may be empty.
    pub parent_node: String,
    /// `IPv4` and `IPv6` together, in the order given.
    pub addresses: Vec<IpPrefix>,
    /// The four rates in bit/s.
    pub rates: CircuitRates,
    /// The optional `sqm` column: the circuit's leaf qdisc as tc's words (`fq_codel`,
    /// `cake diffserv4`, `sfq perturb 10`); empty: htbd's default leaf (fq_codel).
    pub sqm: String,
    /// `sqm` as the leaf it asks for, read once here (`None`: htbd's default leaf).
    pub leaf: Option<LeafSpec>,
}

/// A circuit's plan in bit/s: min is HTB's `rate`, max its `ceil`, per direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitRates {
    /// `Download Min Mbps`.
    pub download_min: u64,
    /// `Upload Min Mbps`.
    pub upload_min: u64,
    /// `Download Max Mbps`.
    pub download_max: u64,
    /// `Upload Max Mbps`.
    pub upload_max: u64,
}

/// LibreQoS's header row, in its order (without the optional `sqm` column), as a literal
/// (tests build their files with `concat!`).
macro_rules! libreqos_header {
    () => {
        concat!(
            "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,",
            "Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment"
        )
    };
}
#[cfg(test)]
pub(crate) use libreqos_header;

/// LibreQoS's header row (named in the error for a missing column).
const LIBREQOS_HEADER: &str = libreqos_header!();

const CIRCUIT_ID: &str = "Circuit ID";
const CIRCUIT_NAME: &str = "Circuit Name";
const DEVICE_ID: &str = "Device ID";
const PARENT_NODE: &str = "Parent Node";
const IPV4: &str = "IPv4";
const IPV6: &str = "IPv6";
const DOWNLOAD_MIN: &str = "Download Min Mbps";
const UPLOAD_MIN: &str = "Upload Min Mbps";
const DOWNLOAD_MAX: &str = "Download Max Mbps";
const UPLOAD_MAX: &str = "Upload Max Mbps";

/// The optional column naming a circuit's leaf qdisc (LibreQoS's per-circuit SQM override).
const SQM: &str = "sqm";
/// Optional columns kept in the circuit's label.
const DEVICE_NAME: &str = "Device Name";
const MAC: &str = "MAC";
const COMMENT: &str = "Comment";

/// The columns htb needs; `sqm` is read when present, and so are `Device Name`, `MAC` and
/// `Comment`, kept in each circuit's label.
const REQUIRED: [&str; 10] = [
    CIRCUIT_ID,
    CIRCUIT_NAME,
    DEVICE_ID,
    PARENT_NODE,
    IPV4,
    IPV6,
    DOWNLOAD_MIN,
    UPLOAD_MIN,
    DOWNLOAD_MAX,
    UPLOAD_MAX,
];

/// Where each required column (and `sqm`, if the file has it) is in a row, and how many
/// columns the header has; then where the optional label columns are.
struct Columns([usize; REQUIRED.len()], Option<usize>, usize, LabelColumns);

/// Where `Device Name`, `MAC` and `Comment` are, if the file has them.
struct LabelColumns {
    device_name: Option<usize>,
    mac: Option<usize>,
    comment: Option<usize>,
}

impl Columns {
    fn find(header: &csv::StringRecord, line: u64) -> Result<Self, CsvError> {
        let mut at = [0; REQUIRED.len()];
        for (slot, name) in at.iter_mut().zip(REQUIRED) {
            *slot = header
                .iter()
                .position(|h| h.trim().eq_ignore_ascii_case(name))
                .ok_or_else(|| CsvError {
                    line,
                    column: "header".into(),
                    message: format!(
                        "no \"{name}\" column (LibreQoS's header is: {LIBREQOS_HEADER})"
                    ),
                })?;
        }
        let optional = |name: &str| {
            header
                .iter()
                .position(|h| h.trim().eq_ignore_ascii_case(name))
        };
        let labels = LabelColumns {
            device_name: optional(DEVICE_NAME),
            mac: optional(MAC),
            comment: optional(COMMENT),
        };
        Ok(Self(at, optional(SQM), header.len(), labels))
    }

    /// How many fields a row has past the header's: an unquoted comma in `Comment`.
    fn overflow(&self, row: &csv::StringRecord) -> usize {
        row.len().saturating_sub(self.2)
    }

    /// An optional column's field ("" when missing); one after `Comment` is moved along by
    /// the commas in it.
    fn optional<'r>(&self, row: &'r csv::StringRecord, at: Option<usize>) -> &'r str {
        let shift = match (at, self.3.comment) {
            (Some(i), Some(c)) if i > c => self.overflow(row),
            _ => 0,
        };
        at.and_then(|i| row.get(i + shift)).map_or("", str::trim)
    }

    /// `Comment`, with the fields its unquoted commas made joined back.
    fn comment(&self, row: &csv::StringRecord) -> String {
        let Some(at) = self.3.comment else {
            return String::new();
        };
        let parts: Vec<&str> = (at..=at + self.overflow(row))
            .filter_map(|i| row.get(i))
            .collect();
        parts.join(",").trim().to_owned()
    }

    /// The `sqm` field of a row (empty when the file has no such column or the row is short).
    /// A row longer than the header has an unquoted comma in a free-text field before it
    /// (LibreQoS's own example does, in `Comment`): an `sqm` column that ends the header is
    /// then the row's last field.
    fn sqm<'r>(&self, row: &'r csv::StringRecord) -> &'r str {
        let at = match self.1 {
            Some(i) if i + 1 == self.2 && row.len() > self.2 => Some(row.len() - 1),
            other => other,
        };
        at.and_then(|i| row.get(i)).map_or("", str::trim)
    }

    fn get<'r>(&self, row: &'r csv::StringRecord, name: &str) -> Option<&'r str> {
        let i = REQUIRED.iter().position(|n| *n == name)?;
        row.get(self.0[i]).map(str::trim)
    }
}

/// Reads the whole file; the first error stops it.
///
/// # Errors
/// A malformed row or header, with its line and column.
pub fn read(text: &str) -> Result<Vec<ShapedDevice>, CsvError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .comment(Some(b'#'))
        // LibreQoS's own example has rows whose free-text comment holds an unquoted comma;
        // only the columns we read must be where the header says.
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut columns = None;
    // A row a line, but for the header (a million devices grown by doubling were copied
    // over and over).
    let lines = text.bytes().filter(|&b| b == b'\n').count();
    let mut devices = Vec::with_capacity(lines);
    for record in reader.records() {
        let record = record.map_err(|e| CsvError {
            line: e.position().map_or(0, csv::Position::line),
            column: "-".into(),
            message: e.to_string(),
        })?;
        let line = record.position().map_or(0, csv::Position::line);
        if record.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        match &columns {
            None => columns = Some(Columns::find(&record, line)?),
            Some(c) => devices.push(device(c, &record, line)?),
        }
    }
    if columns.is_none() {
        return Err(CsvError {
            line: 1,
            column: "header".into(),
            message: "the file is empty (no header row)".into(),
        });
    }
    Ok(devices)
}

fn device(c: &Columns, row: &csv::StringRecord, line: u64) -> Result<ShapedDevice, CsvError> {
    let err = |column: &str, message: String| CsvError {
        line,
        column: column.to_owned(),
        message,
    };
    let field = |name: &str| {
        c.get(row, name)
            .ok_or_else(|| err(name, format!("missing (the row has {} fields)", row.len())))
    };
    let mut addresses = Vec::new();
    for (name, v6) in [(IPV4, false), (IPV6, true)] {
        for part in field(name)?.split(',').map(str::trim) {
            if part.is_empty() {
                continue;
            }
            let prefix: IpPrefix = part
                .parse()
                .map_err(|e| err(name, format!("\"{part}\": {e}")))?;
            if prefix.addr().is_ipv6() != v6 {
                return Err(err(name, format!("\"{part}\" is not an {name} address")));
            }
            addresses.push(prefix);
        }
    }
    if addresses.is_empty() {
        return Err(err(IPV4, "the device has no IPv4 or IPv6 address".into()));
    }
    let rate = |name: &str| {
        let text = field(name)?;
        mbps_to_bits(text).map_err(|why| err(name, format!("\"{text}\": {why}")))
    };
    let rates = CircuitRates {
        download_min: rate(DOWNLOAD_MIN)?,
        upload_min: rate(UPLOAD_MIN)?,
        download_max: rate(DOWNLOAD_MAX)?,
        upload_max: rate(UPLOAD_MAX)?,
    };
    for (min, max, min_name, max_name) in [
        (
            rates.download_min,
            rates.download_max,
            DOWNLOAD_MIN,
            DOWNLOAD_MAX,
        ),
        (rates.upload_min, rates.upload_max, UPLOAD_MIN, UPLOAD_MAX),
    ] {
        if max < min {
            return Err(err(
                max_name,
                format!("below \"{min_name}\" (HTB's ceil must be at least its rate)"),
            ));
        }
    }
    let sqm = c.sqm(row);
    let leaf = check_sqm(sqm).map_err(|why| err(SQM, format!("\"{sqm}\": {why}")))?;
    let mac = match c.optional(row, c.3.mac) {
        // What files write for "none".
        "" | "-" => None,
        text if ["n/a", "na", "none", "null", "unknown"]
            .contains(&text.to_lowercase().as_str()) =>
        {
            None
        }
        text => Some(
            text.parse()
                .map_err(|e: htb_ipc::LabelError| err(MAC, e.to_string()))?,
        ),
    };
    Ok(ShapedDevice {
        line,
        circuit_id: field(CIRCUIT_ID)?.to_owned(),
        circuit_name: field(CIRCUIT_NAME)?.to_owned(),
        device_id: field(DEVICE_ID)?.to_owned(),
        device_name: c.optional(row, c.3.device_name).to_owned(),
        mac,
        comment: c.comment(row),
        parent_node: field(PARENT_NODE)?.to_owned(),
        addresses,
        rates,
        sqm: sqm.to_owned(),
        leaf,
    })
}

/// Reads an `sqm` field as the leaf line `qdisc add … parent CLASS SQM` would ask for: tc's
/// words that htb-cli's parser takes, and nothing that could change the batch
/// line around them (a `#`, a `\\`, quotes). `cake …`, LibreQoS's default, is refused here with
/// the parser's reason until the cake leaf exists.
fn check_sqm(sqm: &str) -> Result<Option<LeafSpec>, SqmError> {
    if sqm.is_empty() {
        return Ok(None);
    }
    if let Some(bad) = sqm
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || " ._:/-".contains(*c)))
    {
        return Err(SqmError::Character(bad));
    }
    let mut words: Vec<String> = ["qdisc", "add", "dev", "dev0", "parent", "1:1"]
        .map(String::from)
        .to_vec();
    words.extend(sqm.split_whitespace().map(String::from));
    match crate::tc::parse::parse_command(&words) {
        Ok(crate::tc::parse::Action::Change(htb_ipc::Command::LeafAdd(l))) => Ok(Some(l.leaf)),
        Ok(_) => Err(SqmError::NotALeaf),
        Err(e) => Err(SqmError::Refused(e)),
    }
}

/// Why an `sqm` field is not a leaf qdisc line.
#[derive(Debug, thiserror::Error)]
enum SqmError {
    #[error("{0:?} cannot be in a leaf qdisc's words (such as fq_codel or sfq perturb 10)")]
    Character(char),
    #[error("not a leaf qdisc (such as fq_codel or sfq perturb 10)")]
    NotALeaf,
    #[error("{0}")]
    Refused(crate::tc::args::UsageError),
}

/// `2.5` Mbps → 2 500 000 bit/s, exactly (decimal, not floating point); at most 6 decimals
/// (1 bit/s), more than zero.
pub(super) fn mbps_to_bits(text: &str) -> Result<u64, &'static str> {
    const WHY: &str = "expected Mbps such as 100 or 2.5";
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) {
        return Err(WHY);
    }
    if frac.len() > 6 {
        return Err("more than 6 decimals (finer than 1 bit/s)");
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| "too large")?
    };
    let frac_bits: u64 = format!("{frac:0<6}").parse().map_err(|_| WHY)?;
    let bits = whole
        .checked_mul(1_000_000)
        .and_then(|b| b.checked_add(frac_bits))
        .ok_or("too large")?;
    if bits == 0 {
        return Err("a rate must be above 0");
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = concat!(libreqos_header!(), "\n");

    #[test]
    fn libreqos_rows_read_with_decimal_rates_lists_and_comments() {
        let text = format!(
            "# a comment\n{HEADER}1,\"968 Circle St., Gurnee\",1,Device 1,AP_A,,\
             \"100.64.0.1, 100.64.0.14\",fdd7:b724:0:100::/56,1,0.5,155,20.25,Plan A, gold\n"
        );
        let devices = read(&text).unwrap();
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!(d.line, 3);
        assert_eq!(d.circuit_id, "1");
        assert_eq!(d.circuit_name, "968 Circle St., Gurnee");
        assert_eq!(d.parent_node, "AP_A");
        let addrs: Vec<String> = d.addresses.iter().map(ToString::to_string).collect();
        assert_eq!(
            addrs,
            ["100.64.0.1/32", "100.64.0.14/32", "fdd7:b724:0:100::/56"]
        );
        assert_eq!(
            d.rates,
            CircuitRates {
                download_min: 1_000_000,
                upload_min: 500_000,
                download_max: 155_000_000,
                upload_max: 20_250_000,
            }
        );
        // The label's columns: the comment whole, though its comma made an extra field.
        assert_eq!(
            (d.device_name.as_str(), d.mac, d.comment.as_str()),
            ("Device 1", None, "Plan A, gold")
        );
    }

    #[test]
    fn macs_are_read_in_the_forms_files_have() {
        let row = |mac: &str| format!("{HEADER}1,c,1,d,,{mac},10.0.0.1,,1,1,10,10,\n");
        for mac in [
            "00:1A:2b:3c:4d:5e",
            "001a.2b3c.4d5e",
            "001a2b3c4d5e",
            "00-1a-2b-3c-4d-5e",
        ] {
            let d = &read(&row(mac)).unwrap()[0];
            assert_eq!(
                d.mac.map(|m| m.to_string()).as_deref(),
                Some("00:1a:2b:3c:4d:5e"),
                "{mac}"
            );
        }
        for none in ["", "N/A", "none", "-"] {
            assert_eq!(read(&row(none)).unwrap()[0].mac, None, "{none}");
        }
        let e = read(&row("00:1a:2b")).unwrap_err().to_string();
        assert!(
            e.contains("line 2, column \"MAC\": \"00:1a:2b\" is not a MAC address"),
            "{e}"
        );
    }

    #[test]
    fn header_columns_are_found_by_name_in_any_order() {
        let text = "IPv6,IPv4,Upload Max Mbps,Download Max Mbps,Upload Min Mbps,\
                    Download Min Mbps,Parent Node,Device ID,Circuit Name,Circuit ID\n\
                    ,10.0.0.1,2,3,1,1,,d,c,7\n";
        let d = &read(text).unwrap()[0];
        assert_eq!(d.circuit_id, "7");
        assert_eq!(d.rates.download_max, 3_000_000);
        assert_eq!(d.rates.upload_max, 2_000_000);
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let row = |fields: &str| format!("{HEADER}{fields}\n");
        let cases = [
            (
                row("1,c,1,d,,,10.0.0.300,,1,1,10,10,"),
                "line 2, column \"IPv4\": \"10.0.0.300\": ",
            ),
            (
                row("1,c,1,d,,,10.0.0.1,10.0.0.2,1,1,10,10,"),
                "column \"IPv6\": \"10.0.0.2\" is not an IPv6 address",
            ),
            (
                row("1,c,1,d,,,10.0.0.1,,1,1,10,1.5x,"),
                "column \"Upload Max Mbps\": \"1.5x\": expected Mbps",
            ),
            (
                row("1,c,1,d,,,10.0.0.1,,20,1,10,10,"),
                "column \"Download Max Mbps\": below \"Download Min Mbps\"",
            ),
            (row("1,c,1,d,,,,,1,1,10,10,"), "has no IPv4 or IPv6 address"),
            (row("1,c,1,d,,,10.0.0.1,,0,1,10,10,"), "above 0"),
            (
                row("1,c,1,d,,,10.0.0.1,,1,1"),
                "\"Download Max Mbps\": missing",
            ),
            (
                "Circuit ID,IPv4\n1,10.0.0.1\n".to_owned(),
                "line 1, column \"header\": no \"Circuit Name\" column",
            ),
            (String::new(), "the file is empty"),
        ];
        for (text, want) in cases {
            let got = read(&text).unwrap_err().to_string();
            assert!(got.contains(want), "{got:?} lacks {want:?}");
        }
    }

    #[test]
    fn mbps_are_converted_exactly() {
        assert_eq!(mbps_to_bits("0.1"), Ok(100_000));
        assert_eq!(mbps_to_bits("1500.5"), Ok(1_500_500_000));
        assert_eq!(mbps_to_bits(".25"), Ok(250_000));
        assert_eq!(mbps_to_bits("3."), Ok(3_000_000));
        assert_eq!(mbps_to_bits("0.000001"), Ok(1));
        assert!(mbps_to_bits("0.0000001").is_err());
        assert!(mbps_to_bits("-1").is_err());
        assert!(mbps_to_bits(".").is_err());
        assert!(mbps_to_bits("1e3").is_err());
        assert!(mbps_to_bits("99999999999999999999").is_err());
    }
}
