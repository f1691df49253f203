//! Token buckets per principal: `rate` tokens a second refill a bucket of `burst`, each request
//! takes one, an empty bucket answers "retry after d". Keys are opaque strings chosen by the caller
//! (the gate uses `key:<hash>`, `sbx:<id>` and `ip:<addr>`).
//!
//! This module only counts: it does not know what a request, a key or an HTTP status is. Buckets
//! live in memory (a restart refills them all). Idle buckets that have refilled completely carry no
//! information and are dropped whenever the table grows past [`MAX_IDLE_BUCKETS`], so the table
//! stays bounded however many addresses knock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Above this many buckets, full (idle) ones are pruned before a new one is added.
pub const MAX_IDLE_BUCKETS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The limiter: one rate and burst for every key.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// `rate` requests a second on average with bursts of `burst` (at least 1). `None` when
    /// `rate` is 0 (rate limiting off).
    pub fn new(rate: f64, burst: u32) -> Option<RateLimiter> {
        if rate.is_nan() || rate <= 0.0 || rate.is_infinite() {
            return None;
        }
        Some(RateLimiter {
            rate,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Take one token from `key`'s bucket at `now`: `Ok` or `Err(how long until one is there)`.
    pub fn check(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(key) && map.len() >= MAX_IDLE_BUCKETS {
            let (rate, burst) = (self.rate, self.burst);
            map.retain(|_, b| refill(b, rate, burst, now) < burst);
        }
        let b = map.entry(key.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let tokens = refill(b, self.rate, self.burst, now);
        b.at = now.max(b.at);
        if tokens >= 1.0 {
            b.tokens = tokens - 1.0;
            Ok(())
        } else {
            b.tokens = tokens;
            Err(Duration::from_secs_f64((1.0 - tokens) / self.rate))
        }
    }

    /// Take `tokens` more from `key`'s bucket without refusing anything (a penalty, e.g. for a
    /// failed authentication): the bucket may go below zero, at most one burst deep, which pushes
    /// the next accepted request further away.
    pub fn charge(&self, key: &str, tokens: f64, now: Instant) {
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let b = map.entry(key.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        b.tokens = (refill(b, self.rate, self.burst, now) - tokens).max(-self.burst);
        b.at = now.max(b.at);
    }

    /// How many buckets exist (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The tokens `b` holds at `now` (a clock that went backwards adds nothing).
fn refill(b: &Bucket, rate: f64, burst: f64, now: Instant) -> f64 {
    let dt = now.saturating_duration_since(b.at).as_secs_f64();
    (b.tokens + dt * rate).min(burst)
}

/// `Retry-After` seconds for a wait: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let s = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    s.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_rate_is_off() {
        assert!(RateLimiter::new(0.0, 10).is_none());
        assert!(RateLimiter::new(f64::NAN, 10).is_none());
        assert!(RateLimiter::new(-1.0, 10).is_none());
    }

    #[test]
    fn burst_then_refill_at_the_rate() {
        let l = RateLimiter::new(2.0, 3).unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.check("a", t0).is_ok());
        }
        let wait = l.check("a", t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(400) && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert!(l.check("a", t1).is_ok());
        assert!(l.check("a", t1).is_err());
        // Much later the bucket is full again, but never more than the burst.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(l.check("a", t2).is_ok());
        }
        assert!(l.check("a", t2).is_err());
    }

    #[test]
    fn keys_are_independent() {
        let l = RateLimiter::new(1.0, 1).unwrap();
        let t = Instant::now();
        assert!(l.check("a", t).is_ok());
        assert!(l.check("a", t).is_err());
        assert!(l.check("b", t).is_ok(), "another key has its own bucket");
    }

    #[test]
    fn refused_requests_do_not_drain_further() {
        // Hammering an empty bucket does not push the next token further away.
        let l = RateLimiter::new(1.0, 1).unwrap();
        let t = Instant::now();
        assert!(l.check("a", t).is_ok());
        for _ in 0..100 {
            assert!(l.check("a", t).is_err());
        }
        assert!(l.check("a", t + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_clock_going_backwards_is_harmless() {
        let l = RateLimiter::new(1.0, 2).unwrap();
        let t = Instant::now() + Duration::from_secs(10);
        assert!(l.check("a", t).is_ok());
        assert!(l.check("a", t - Duration::from_secs(5)).is_ok());
        assert!(l.check("a", t - Duration::from_secs(5)).is_err());
    }

    #[test]
    fn charges_push_the_next_request_away_but_not_forever() {
        let l = RateLimiter::new(1.0, 10).unwrap();
        let t = Instant::now();
        assert!(l.check("a", t).is_ok());
        l.charge("a", 100.0, t);
        let wait = l.check("a", t).unwrap_err();
        // At most one burst below zero: 11 tokens to go at 1/s.
        assert!(
            wait <= Duration::from_secs(11) && wait > Duration::from_secs(10),
            "{wait:?}"
        );
        assert!(l.check("a", t + Duration::from_secs(11)).is_ok());
        assert!(l.check("b", t).is_ok(), "other keys are not charged");
    }

    #[test]
    fn idle_buckets_are_pruned() {
        let l = RateLimiter::new(1000.0, 1).unwrap();
        let t = Instant::now();
        for i in 0..MAX_IDLE_BUCKETS {
            let _ = l.check(&format!("ip:{i}"), t);
        }
        assert_eq!(l.len(), MAX_IDLE_BUCKETS);
        // A second later every bucket is full again: they go when a new key arrives.
        let _ = l.check("new", t + Duration::from_secs(1));
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
    }
}
