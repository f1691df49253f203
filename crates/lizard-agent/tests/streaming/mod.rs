//! Helpers for streamed requests to the agent (NDJSON lines, raw bodies), on top of `common`.

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::Response;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Send a request over the agent's Unix socket with any body type.
pub async fn send<B>(socket: &Path, req: hyper::Request<B>) -> Response<Incoming>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender.send_request(req).await.unwrap()
}

pub fn json_req(
    method: &str,
    path: &str,
    body: &Value,
    accept: Option<&str>,
) -> hyper::Request<Full<Bytes>> {
    let mut b = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "agent")
        .header("content-type", "application/json");
    if let Some(a) = accept {
        b = b.header("accept", a);
    }
    b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// NDJSON lines of a response body, read as they arrive.
pub struct Lines {
    body: Incoming,
    buf: Vec<u8>,
}

impl Lines {
    pub fn new(resp: Response<Incoming>) -> Lines {
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
        Lines {
            body: resp.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next line as JSON; `None` at the end of the body. Panics after `timeout`.
    pub async fn next_within(&mut self, timeout: Duration) -> Option<Value> {
        tokio::time::timeout(timeout, self.next())
            .await
            .expect("no NDJSON line in time")
    }

    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("a JSON line"));
            }
            match self.body.frame().await {
                Some(f) => {
                    if let Ok(data) = f.unwrap().into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                None => return None,
            }
        }
    }

    /// Everything up to the end of the body.
    pub async fn rest(&mut self, timeout: Duration) -> Vec<Value> {
        let mut v = Vec::new();
        tokio::time::timeout(timeout, async {
            while let Some(l) = self.next().await {
                v.push(l);
            }
        })
        .await
        .expect("stream did not end in time");
        v
    }
}

/// All text of `type` events concatenated.
pub fn text_of(events: &[Value], kind: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .filter_map(|e| e["text"].as_str())
        .collect()
}

/// All bytes (`data_b64`) of `type` events concatenated.
pub fn bytes_of(events: &[Value], kind: &str) -> Vec<u8> {
    use base64::Engine as _;
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .filter_map(|e| e["data_b64"].as_str())
        .flat_map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
        .collect()
}

pub fn b64(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

pub async fn body_bytes(resp: Response<Incoming>) -> Bytes {
    resp.into_body().collect().await.unwrap().to_bytes()
}
