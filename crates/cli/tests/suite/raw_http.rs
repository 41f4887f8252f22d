//! One HTTP/1.1 request with exactly the headers a test gives (the typed client always sends
//! its own), its answer read whole: for checks of `Host`, `Origin` and MCP session headers.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An answer: status, headers and body.
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Sends `method path` with `headers` (plus `Host: addr` and `Connection: close` unless
/// given) and `body`; reads until the server closes, or only the head of a
/// `101` upgrade.
pub async fn raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Raw {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let has = |wanted: &str| {
        headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(wanted))
    };
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !has("host") {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    if !has("connection") {
        request.push_str("Connection: close\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let read = tokio::time::timeout(
            ptyhub_test_support::default_timeout(),
            stream.read(&mut chunk),
        )
        .await
        .unwrap_or_else(|_| panic!("no whole answer to {method} {path}"))
        .unwrap_or_else(|e| panic!("read: {e}"));
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..read]);
        if is_complete(&answer) {
            break;
        }
    }
    parse(&answer)
}

/// Whether `answer` is whole without waiting for the close: the head of an upgrade, or a
/// body as long as its `Content-Length` (a refused upgrade keeps the connection open).
fn is_complete(answer: &[u8]) -> bool {
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    if answer.starts_with(b"HTTP/1.1 101") {
        return true;
    }
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    head.lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|len| len.trim().parse::<usize>().ok())
        .is_some_and(|len| answer.len() >= end + 4 + len)
}

/// Splits an answer into status, headers and (de-chunked) body.
pub fn parse(answer: &[u8]) -> Raw {
    let text = String::from_utf8_lossy(answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let is_chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if is_chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Raw {
        status,
        headers,
        body,
    }
}

fn dechunk(body: &str) -> String {
    // Chunk sizes count bytes, so the body is cut as bytes.
    let mut body = body.as_bytes();
    let mut out = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..line_end])
            .ok()
            .and_then(|size| usize::from_str_radix(size.trim(), 16).ok());
        let rest = &body[line_end + 2..];
        match size {
            Some(size) if size > 0 && rest.len() >= size => {
                out.extend_from_slice(&rest[..size]);
                body = rest[size..].strip_prefix(b"\r\n").unwrap_or(&rest[size..]);
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
