//! A 1 GiB file uploaded into a sandbox and downloaded again through the server, streamed from a
//! generator and checked as it arrives, with the server's and the agent's peak memory bounded. Alone
//! in its binary: it measures the server process's peak RSS.

mod common;

use bytes::Bytes;
use common::*;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The file is CHUNKS × (an 8-byte chunk number + the same 1 MiB of noise).
const CHUNKS: u64 = 1024;
const NOISE: usize = 1 << 20;
const PERIOD: u64 = 8 + NOISE as u64;
const TOTAL: u64 = CHUNKS * PERIOD;
/// How much the server's peak RSS may grow while moving the file.
const MAX_GROWTH: u64 = 200 << 20;

fn noise() -> Bytes {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut v = Vec::with_capacity(NOISE);
    while v.len() < NOISE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    Bytes::from(v)
}

async fn connect(s: &Server) -> hyper::client::conn::http1::SendRequest<StreamBody<FrameStream>> {
    let stream = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    tx
}

type FrameStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>> + Send>,
>;

fn frames(items: Vec<Bytes>) -> StreamBody<FrameStream> {
    StreamBody::new(Box::pin(futures_util::stream::iter(
        items.into_iter().map(|b| Ok(Frame::data(b))),
    )))
}

#[tokio::test]
async fn one_gib_round_trip_with_bounded_memory() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.admin_key.clone();
    // 1 GiB of data needs more than the default 1 GiB writable layer.
    let id = s.create(&key, json!({"limits": {"disk_mb": 3072}})).await;
    let pid = server_pid(s.data_dir.path());
    let before = vm_hwm(pid);
    let noise = noise();
    let url = format!("/v1/sandboxes/{id}/files?path=big/one-gib.bin");

    // Upload from a generator: nothing close to 1 GiB is ever allocated here.
    let gen = {
        let noise = noise.clone();
        futures_util::stream::iter(0..CHUNKS).flat_map(move |i| {
            futures_util::stream::iter([
                Ok(Frame::data(Bytes::copy_from_slice(&i.to_le_bytes()))),
                Ok(Frame::data(noise.clone())),
            ])
        })
    };
    let body: FrameStream = Box::pin(gen);
    let req = hyper::Request::put(&url)
        .header("host", "lizard")
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/octet-stream")
        .header("content-length", TOTAL.to_string())
        .body(StreamBody::new(body))
        .unwrap();
    let t0 = Instant::now();
    let resp = connect(&s).await.send_request(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let entry: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(entry["size"].as_u64(), Some(TOTAL));
    let up = t0.elapsed();

    // Download and check every byte as it streams in.
    let req = hyper::Request::get(&url)
        .header("host", "lizard")
        .header("authorization", format!("Bearer {key}"))
        .body(frames(vec![]))
        .unwrap();
    let t0 = Instant::now();
    let resp = connect(&s).await.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-length"], TOTAL.to_string().as_str());
    let mut body = resp.into_body();
    let mut pos: u64 = 0;
    while let Some(f) = body.frame().await {
        let data = f.unwrap().into_data().unwrap_or_default();
        let mut rest = &data[..];
        while !rest.is_empty() {
            let chunk = pos / PERIOD;
            let off = (pos % PERIOD) as usize;
            let (expected, from): (&[u8], usize) = if off < 8 {
                (&chunk.to_le_bytes()[..], off)
            } else {
                (&noise[..], off - 8)
            };
            let n = rest.len().min(expected.len() - from);
            assert!(
                rest[..n] == expected[from..from + n],
                "content differs at byte {pos}"
            );
            rest = &rest[n..];
            pos += n as u64;
        }
    }
    assert_eq!(pos, TOTAL);
    let down = t0.elapsed();

    let growth = vm_hwm(pid).saturating_sub(before);
    eprintln!(
        "1 GiB: up {:.1} s, down {:.1} s, server peak RSS growth {} MiB",
        up.as_secs_f64(),
        down.as_secs_f64(),
        growth >> 20
    );
    assert!(
        growth < MAX_GROWTH,
        "server peak RSS grew by {} MiB",
        growth >> 20
    );
    // The agent (PID 1 in the sandbox) streamed it too.
    let (out, _) = s
        .sh(&id, "grep VmHWM /proc/1/status; stat -c %s big/one-gib.bin")
        .await;
    let mut lines = out.lines();
    let agent_kb: u64 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        agent_kb * 1024 < MAX_GROWTH,
        "agent peak RSS {} MiB",
        agent_kb >> 10
    );
    assert_eq!(lines.next(), Some(TOTAL.to_string().as_str()));
    assert!(up < Duration::from_secs(300) && down < Duration::from_secs(300));
}
