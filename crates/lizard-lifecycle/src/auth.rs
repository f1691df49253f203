//! API keys: generation, hashing, and who a bearer token is.
//!
//! Keys are 32 random bytes shown once as `lz_<64 hex>`; the store keeps only their SHA-256. A key
//! is either an **admin** key (created at the first start of a data dir; may act on every project and
//! creates projects on first use) or a **project** key (sees only its own project; everything else is
//! a 404). Lookup is by hash, so comparing keys never touches the secret byte by byte.

use crate::store::{Store, StoreError};

pub use crate::store::KeyHash;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Project(String),
}

impl Principal {
    /// Whether this caller may see `project`.
    pub fn can_see(&self, project: &str) -> bool {
        match self {
            Principal::Admin => true,
            Principal::Project(p) => p == project,
        }
    }

    /// The project a request acts in: the named one (checked) or the key's own.
    pub fn project_for(&self, named: Option<&str>) -> Option<String> {
        match (self, named) {
            (Principal::Admin, Some(n)) => Some(n.to_string()),
            (Principal::Admin, None) => Some(DEFAULT_PROJECT.to_string()),
            (Principal::Project(p), None) => Some(p.clone()),
            (Principal::Project(p), Some(n)) if p == n => Some(p.clone()),
            (Principal::Project(_), Some(_)) => None,
        }
    }
}

/// The project an admin key's requests land in when they name none.
pub const DEFAULT_PROJECT: &str = "default";

/// A new random key.
pub fn new_key() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source is available");
    format!(
        "lz_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

/// Create and store a key (admin when `project` is `None`); returns the key text.
pub fn issue_key(store: &Store, project: Option<&str>) -> Result<String, StoreError> {
    let key = new_key();
    store.add_key(&KeyHash::of(&key), &key[..8], project)?;
    Ok(key)
}

/// The key a token names: `lz_<hex>` as it is, and `e2b_<hex>` as `lz_<hex>` — the same key in
/// the shape E2B's SDKs (about Python 2.24 / JS 2.26 to the mid-2026 releases) check before they
/// send anything (`^e2b_[0-9a-f]+$`), so that an E2B user's `E2B_API_KEY` needs no
/// `E2B_VALIDATE_API_KEY=false`. Anything else is looked up as it is (and found by no hash).
pub fn canonical_key(token: &str) -> std::borrow::Cow<'_, str> {
    match token.strip_prefix("e2b_") {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            std::borrow::Cow::Owned(format!("lz_{}", hex.to_ascii_lowercase()))
        }
        _ => std::borrow::Cow::Borrowed(token),
    }
}

/// Resolve a bearer token.
pub fn principal(store: &Store, token: &str) -> Result<Option<Principal>, StoreError> {
    Ok(store
        .key_project(&KeyHash::of(&canonical_key(token)))?
        .map(|p| match p {
            None => Principal::Admin,
            Some(p) => Principal::Project(p),
        }))
}

/// An authenticated caller, as the gate found it (kept in the request's extensions so the key is
/// looked up once per request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub principal: Principal,
    /// The key's stored prefix (`lz_` + 5 hex), for the audit log; never the key.
    pub key_prefix: String,
    /// The key's hash (the rate limiter's bucket).
    pub key_hash: KeyHash,
}

/// Resolve a bearer token to its caller (with the key's prefix and hash).
pub fn caller(store: &Store, token: &str) -> Result<Option<Caller>, StoreError> {
    let key_hash = KeyHash::of(&canonical_key(token));
    Ok(store
        .key_lookup(&key_hash)?
        .map(|(project, key_prefix)| Caller {
            principal: match project {
                None => Principal::Admin,
                Some(p) => Principal::Project(p),
            },
            key_prefix,
            key_hash,
        }))
}

/// Project names: 1–63 characters of `[a-zA-Z0-9._-]`, starting with a letter or digit.
pub fn valid_project_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_e2b_form_is_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let key = issue_key(&store, Some("p")).unwrap();
        let e2b = format!("e2b_{}", key.strip_prefix("lz_").unwrap());
        assert!(
            e2b.starts_with("e2b_") && e2b.len() == key.len() + 1,
            "{e2b}"
        );
        let p = Some(Principal::Project("p".into()));
        assert_eq!(principal(&store, &key).unwrap(), p);
        assert_eq!(principal(&store, &e2b).unwrap(), p);
        assert_eq!(
            principal(&store, &e2b.to_uppercase().replacen("E2B_", "e2b_", 1)).unwrap(),
            p
        );
        let (a, b) = (
            caller(&store, &key).unwrap().unwrap(),
            caller(&store, &e2b).unwrap().unwrap(),
        );
        assert_eq!(a, b, "one key: one prefix, one rate-limit bucket");
        // Not an alias: other shapes are looked up as they are.
        for t in ["e2b_", "e2b_xyz", &format!("e2b_{}-", &key[3..]), "E2B_00"] {
            assert_eq!(canonical_key(t), t);
            assert_eq!(principal(&store, t).unwrap(), None);
        }
    }

    #[test]
    fn keys_are_random_and_hashed() {
        let a = new_key();
        let b = new_key();
        assert_ne!(a, b);
        assert!(a.starts_with("lz_") && a.len() == 67);
        assert_eq!(KeyHash::of(&a), KeyHash::of(&a));
        assert_ne!(KeyHash::of(&a), KeyHash::of(&b));
    }

    #[test]
    fn project_scoping() {
        let p = Principal::Project("a".into());
        assert_eq!(p.project_for(None).as_deref(), Some("a"));
        assert_eq!(p.project_for(Some("a")).as_deref(), Some("a"));
        assert_eq!(p.project_for(Some("b")), None);
        assert!(!p.can_see("b"));
        assert_eq!(
            Principal::Admin.project_for(None).as_deref(),
            Some("default")
        );
        assert!(valid_project_name("my-project"));
        assert!(!valid_project_name("-x"));
        assert!(!valid_project_name("a b"));
    }

    proptest::proptest! {
        /// Project names accepted are exactly 1–63 of `[a-zA-Z0-9._-]` starting alphanumeric: never
        /// a path (`/`, `..` alone), never empty, never control characters; any string is judged
        /// without panicking.
        #[test]
        fn project_names_are_judged_totally(n in proptest::prop_oneof![".{0,80}", "[a-zA-Z0-9._/-]{0,70}"]) {
            if valid_project_name(&n) {
                proptest::prop_assert!(!n.is_empty() && n.len() <= 63);
                proptest::prop_assert!(!n.contains('/') && n != ".." && !n.starts_with('.'));
                proptest::prop_assert!(n.bytes().all(|b| b.is_ascii_graphic()));
            }
        }

        /// Any bearer token is looked up without panicking; only issued keys resolve.
        #[test]
        fn arbitrary_tokens_resolve_to_nobody(t in ".{0,100}") {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(&dir.path().join("db")).unwrap();
            let key = issue_key(&store, Some("p")).unwrap();
            proptest::prop_assume!(t != key);
            proptest::prop_assert_eq!(principal(&store, &t).unwrap(), None);
            proptest::prop_assert_eq!(caller(&store, &t).unwrap(), None);
        }
    }
}
