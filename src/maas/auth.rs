//! The MAAS API key and the OAuth 1.0a PLAINTEXT `Authorization` header.
//!
//! MAAS keys are `consumer_key:token_key:token_secret` with an always-empty
//! consumer secret, so the PLAINTEXT signature is `&<token_secret>`, which does
//! not depend on the method, URL or body. That is why we use PLAINTEXT rather
//! than HMAC-SHA1: nothing about the request can make the signature wrong.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use super::form::percent_encode;

/// A parsed MAAS API key. `Debug` and `Display` never show the token secret
/// (nor the other two parts, which together identify the credential).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    consumer_key: String,
    token_key: String,
    token_secret: String,
}

/// Why a key was rejected; the message never contains the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidApiKey(String);

impl fmt::Display for InvalidApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid MAAS API key: {}; expected \"<consumer_key>:<token_key>:<token_secret>\" \
             as shown by `maas apikey --username <user>`",
            self.0
        )
    }
}

impl std::error::Error for InvalidApiKey {}

impl ApiKey {
    /// Parses `consumer_key:token_key:token_secret`. Surrounding whitespace
    /// (a trailing newline from a Secret file) is ignored.
    pub fn parse(key: &str) -> Result<ApiKey, InvalidApiKey> {
        let key = key.trim();
        if key.is_empty() {
            return Err(InvalidApiKey("it is empty".into()));
        }
        let parts: Vec<&str> = key.split(':').collect();
        if parts.len() != 3 {
            return Err(InvalidApiKey(format!(
                "it has {} colon-separated parts, not 3",
                parts.len()
            )));
        }
        const NAMES: [&str; 3] = ["consumer key", "token key", "token secret"];
        for (part, name) in parts.iter().zip(NAMES) {
            if part.is_empty() {
                return Err(InvalidApiKey(format!("the {name} is empty")));
            }
            if part.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(InvalidApiKey(format!(
                    "the {name} contains whitespace or control characters"
                )));
            }
            // MAAS makes keys of letters and digits; anything beyond
            // printable ASCII (a byte-order mark, a non-breaking space
            // from a web page) was pasted by mistake and would only earn
            // a 401.
            if !part.chars().all(|c| c.is_ascii_graphic()) {
                return Err(InvalidApiKey(format!(
                    "the {name} contains characters other than printable ASCII"
                )));
            }
        }
        let [consumer_key, token_key, token_secret] = parts.as_slice() else {
            return Err(InvalidApiKey(
                "expected <consumer key>:<token key>:<token secret>".to_string(),
            ));
        };
        Ok(ApiKey {
            consumer_key: (*consumer_key).to_owned(),
            token_key: (*token_key).to_owned(),
            token_secret: (*token_secret).to_owned(),
        })
    }

    /// The consumer key, which is not secret on its own (MAAS echoes token
    /// keys in its error bodies); still, avoid logging it needlessly.
    pub fn consumer_key(&self) -> &str {
        &self.consumer_key
    }

    /// Used by error redaction: any text we surface is scrubbed of these.
    pub(crate) fn parts(&self) -> [&str; 3] {
        [&self.consumer_key, &self.token_key, &self.token_secret]
    }

    /// The header for one request. Each request and each retry must get a
    /// fresh nonce: MAAS remembers nonces and answers 401 on reuse.
    pub fn authorization_header(&self) -> String {
        self.authorization_header_with(&new_nonce(), unix_now())
    }

    /// The header with a given nonce and timestamp (for tests).
    pub fn authorization_header_with(&self, nonce: &str, timestamp: u64) -> String {
        format!(
            "OAuth oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
             oauth_consumer_key=\"{}\", oauth_token=\"{}\", oauth_signature=\"%26{}\", \
             oauth_nonce=\"{}\", oauth_timestamp=\"{}\"",
            percent_encode(&self.consumer_key),
            percent_encode(&self.token_key),
            percent_encode(&self.token_secret),
            percent_encode(nonce),
            timestamp
        )
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted MAAS API key>")
    }
}

/// 16 random bytes as 32 hex digits. If the OS RNG fails (it practically
/// never does) we fall back to the clock and a counter: a nonce only has to
/// be unique, not unpredictable, because PLAINTEXT over the wire already
/// exposes the secret to anyone who can read the traffic.
fn new_nonce() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        return format!("{nanos:x}{count:x}");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "Ck9aXhYcVbPqRsTuWz:Tk2bYcZdAeBfCgDhEi:S3cr3tS3cr3tS3cr3tS3cr3tS3cr3tAB";

    #[test]
    fn header_is_byte_for_byte_plaintext_oauth() {
        let key = ApiKey::parse(KEY).unwrap();
        let header = key.authorization_header_with("0123456789abcdef0123456789abcdef", 1700000000);
        assert_eq!(
            header,
            "OAuth oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
             oauth_consumer_key=\"Ck9aXhYcVbPqRsTuWz\", oauth_token=\"Tk2bYcZdAeBfCgDhEi\", \
             oauth_signature=\"%26S3cr3tS3cr3tS3cr3tS3cr3tS3cr3tAB\", \
             oauth_nonce=\"0123456789abcdef0123456789abcdef\", oauth_timestamp=\"1700000000\""
        );
    }

    #[test]
    fn header_percent_encodes_unusual_characters() {
        let key = ApiKey::parse("a b:c/d:e&f").err();
        assert!(key.is_some(), "whitespace must be rejected");
        let key = ApiKey::parse("c/d:t+k:e&f").unwrap();
        let header = key.authorization_header_with("n", 1);
        assert!(header.contains("oauth_consumer_key=\"c%2Fd\""), "{header}");
        assert!(header.contains("oauth_token=\"t%2Bk\""), "{header}");
        assert!(header.contains("oauth_signature=\"%26e%26f\""), "{header}");
    }

    #[test]
    fn every_header_has_a_fresh_nonce() {
        let key = ApiKey::parse(KEY).unwrap();
        let nonce = |h: &str| {
            let start = h.find("oauth_nonce=\"").unwrap() + 13;
            h[start..start + 32].to_owned()
        };
        let a = nonce(&key.authorization_header());
        let b = nonce(&key.authorization_header());
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    #[test]
    fn malformed_keys_are_rejected_without_echoing_them() {
        for bad in [
            "",
            "   ",
            "onlyonepart",
            "qwxz:vbnm",
            "qwxz:vbnm:jklh:toomany",
            "::",
            "ck::secretpart",
            "ck:tk:sec ret",
            "ck:tk:secret\npasted",
            "ck:tk\r\n:secretpart",
            "\u{feff}consumer:tk:secretpart",
            "ck:tk:secret\u{a0}part",
            "ck:tk:sécretpart",
        ] {
            let err = ApiKey::parse(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid MAAS API key"), "{err}");
            for part in bad.split(':').filter(|p| p.len() > 3) {
                assert!(!err.contains(part), "error {err:?} echoes {part:?}");
            }
        }
    }

    #[test]
    fn surrounding_whitespace_is_trimmed() {
        for padded in [
            format!("{KEY}\n"),
            format!("{KEY}\r\n"),
            format!("  {KEY} \t\n"),
        ] {
            assert_eq!(ApiKey::parse(&padded).unwrap(), ApiKey::parse(KEY).unwrap());
        }
    }

    #[test]
    fn debug_and_display_are_redacted() {
        let key = ApiKey::parse(KEY).unwrap();
        for shown in [
            format!("{key:?}"),
            format!("{key}"),
            format!("{:?}", Some(&key)),
        ] {
            assert!(!shown.contains("S3cr3t"), "{shown}");
            assert!(!shown.contains("Tk2b"), "{shown}");
        }
    }
}
