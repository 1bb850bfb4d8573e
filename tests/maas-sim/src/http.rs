//! A minimal HTTP/1.1 server: one thread per connection, keep-alive,
//! Content-Length and chunked request bodies, urlencoded and multipart forms.
//! Enough for MAAS clients (ureq, curl, python-libmaas) and nothing more.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest request body accepted (boot image uploads are not simulated).
const MAX_BODY: usize = 16 * 1024 * 1024;
/// An idle keep-alive connection is closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Request {
    pub method: String,
    /// Path without the query string, percent-decoded.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    keep_alive: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The form fields of a POST/PUT body (urlencoded or multipart).
    pub fn form(&self) -> Vec<(String, String)> {
        let content_type = self.header("content-type").unwrap_or("");
        if let Some(boundary) = multipart_boundary(content_type) {
            return parse_multipart(&self.body, &boundary);
        }
        if content_type.is_empty() || content_type.starts_with("application/x-www-form-urlencoded")
        {
            return parse_urlencoded(&String::from_utf8_lossy(&self.body));
        }
        Vec::new()
    }
}

pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json; charset=utf-8",
            headers: Vec::new(),
            body: value.to_string().into_bytes(),
        }
    }

    /// A body that is already JSON text.
    pub fn json_text(status: u16, body: String) -> Response {
        Response {
            status,
            content_type: "application/json; charset=utf-8",
            headers: Vec::new(),
            body: body.into_bytes(),
        }
    }

    pub fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    pub fn html(status: u16, body: &str) -> Response {
        Response {
            content_type: "text/html; charset=utf-8",
            ..Response::text(status, body)
        }
    }

    pub fn empty(status: u16) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

/// What the handler wants done with the connection.
pub enum Reply {
    Send(Response),
    /// Close the connection without answering (fault injection).
    Drop,
}

/// Serves one connection until the client closes it or asks to.
pub fn serve_connection(stream: TcpStream, handle: &dyn Fn(Request) -> Reply) {
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut writer = write_half;
    loop {
        let request = match read_request(&mut reader, &mut writer) {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(_) => {
                let _ = write_response(&mut writer, &Response::text(400, "Bad Request"), false);
                return;
            }
        };
        let keep_alive = request.keep_alive;
        match handle(request) {
            Reply::Send(response) => {
                if write_response(&mut writer, &response, keep_alive).is_err() || !keep_alive {
                    return;
                }
            }
            Reply::Drop => {
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

fn read_request(reader: &mut impl BufRead, writer: &mut impl Write) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), version) = (parts.next(), parts.next(), parts.next()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad request line",
        ));
    };
    let method = method.to_owned();
    let http10 = version == Some("HTTP/1.0");
    let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
    let path = percent_decode(raw_path, false);
    let query = parse_urlencoded(raw_query);

    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof in headers",
            ));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let connection = header("connection").unwrap_or_default();
    let keep_alive = if http10 {
        connection == "keep-alive"
    } else {
        connection != "close"
    };
    // curl asks before sending bodies over 1 KiB; answer rather than make
    // it wait out its timeout.
    if header("expect").is_some_and(|e| e == "100-continue") {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        writer.flush()?;
    }
    let body = if header("transfer-encoding").is_some_and(|te| te.contains("chunked")) {
        read_chunked(reader)?
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if len > MAX_BODY {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(Request {
        method,
        path,
        query,
        headers,
        body,
        keep_alive,
    }))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size_hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
        if size == 0 {
            // Trailers until an empty line.
            loop {
                let mut trailer = String::new();
                if reader.read_line(&mut trailer)? == 0 || trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

fn write_response(w: &mut impl Write, response: &Response, keep_alive: bool) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nX-MAAS-API-Hash: maas-sim\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(&response.body)?;
    w.flush()
}

/// Decodes `%XX` (and `+` as space when `plus_is_space`).
pub fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `k=v&k=v` with everything but RFC 3986 unreserved bytes percent-encoded
/// (for a `Location` that repeats the request's query).
pub fn encode_query(pairs: &[(String, String)]) -> String {
    fn encode(s: &str, out: &mut String) {
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        encode(k, &mut out);
        out.push('=');
        encode(v, &mut out);
    }
    out
}

pub fn parse_urlencoded(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

fn multipart_boundary(content_type: &str) -> Option<String> {
    if !content_type.starts_with("multipart/form-data") {
        return None;
    }
    content_type.split(';').find_map(|param| {
        let (k, v) = param.trim().split_once('=')?;
        (k.eq_ignore_ascii_case("boundary")).then(|| v.trim_matches('"').to_owned())
    })
}

fn parse_multipart(body: &[u8], boundary: &str) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let mut fields = Vec::new();
    for part in text.split(delimiter.as_str()).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let part = part.strip_prefix("\r\n").unwrap_or(part);
        let Some((head, value)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let name = head.lines().find_map(|line| {
            let lower = line.to_ascii_lowercase();
            if !lower.starts_with("content-disposition:") {
                return None;
            }
            line.split(';').find_map(|p| {
                let (k, v) = p.trim().split_once('=')?;
                (k == "name").then(|| v.trim_matches('"').to_owned())
            })
        });
        if let Some(name) = name {
            let value = value.strip_suffix("\r\n").unwrap_or(value);
            fields.push((name, value.to_owned()));
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_forms() {
        assert_eq!(
            parse_urlencoded("a=1&tags=x&tags=y+z&e=%26%3D&f"),
            vec![
                ("a".into(), "1".into()),
                ("tags".into(), "x".into()),
                ("tags".into(), "y z".into()),
                ("e".into(), "&=".into()),
                ("f".into(), "".into()),
            ]
        );
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz", false), "%zz");
        let pairs = vec![("a b".to_owned(), "x&y=é".to_owned())];
        assert_eq!(encode_query(&pairs), "a%20b=x%26y%3D%C3%A9");
        assert_eq!(parse_urlencoded(&encode_query(&pairs)), pairs);
    }

    #[test]
    fn parses_multipart() {
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"op\"\r\n\r\nallocate\r\n\
                    --XyZ\r\nContent-Disposition: form-data; name=\"tags\"\r\n\r\na b\r\n--XyZ--\r\n";
        let fields = parse_multipart(body.as_bytes(), "XyZ");
        assert_eq!(
            fields,
            vec![
                ("op".into(), "allocate".into()),
                ("tags".into(), "a b".into())
            ]
        );
        assert_eq!(
            multipart_boundary("multipart/form-data; boundary=\"XyZ\"").as_deref(),
            Some("XyZ")
        );
    }

    #[test]
    fn reads_chunked_and_keep_alive() {
        let raw =
            "POST /x?op=a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        let mut reader = BufReader::new(raw.as_bytes());
        let mut sink = Vec::new();
        let request = read_request(&mut reader, &mut sink).unwrap().unwrap();
        assert_eq!(request.body, b"abc");
        assert_eq!(request.query, vec![("op".into(), "a".into())]);
        assert!(request.keep_alive);
        assert!(read_request(&mut reader, &mut sink).unwrap().is_none());
        assert!(sink.is_empty());
    }

    #[test]
    fn answers_expect_100_continue() {
        let raw = "POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok";
        let mut sink = Vec::new();
        let request = read_request(&mut BufReader::new(raw.as_bytes()), &mut sink)
            .unwrap()
            .unwrap();
        assert_eq!(request.body, b"ok");
        assert_eq!(sink, b"HTTP/1.1 100 Continue\r\n\r\n");
    }
}
