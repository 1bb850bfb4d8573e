//! Percent-encoding for query strings, urlencoded bodies and OAuth values.
//!
//! One encoder for all three: RFC 3986 unreserved characters pass, every other
//! byte becomes `%XX`. That is valid in a query string, in an
//! `application/x-www-form-urlencoded` body (space as `%20` is accepted
//! everywhere `+` is) and is exactly what OAuth 1.0a asks for. The encoding
//! itself is the `percent-encoding` crate's (ureq's own); only the set of
//! characters left alone is ours.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Every byte but RFC 3986's unreserved `A-Z a-z 0-9 - . _ ~` is encoded.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes everything but `A-Z a-z 0-9 - . _ ~`.
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

/// `k=v&k=v`; a list is sent by repeating its key, as MAAS expects.
pub fn encode_pairs<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(&percent_encode(k.as_ref()));
        out.push('=');
        out.push_str(&percent_encode(v.as_ref()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_reserved_and_keeps_unreserved() {
        assert_eq!(percent_encode("aZ09-._~"), "aZ09-._~");
        assert_eq!(percent_encode("a b/c&d=e+f"), "a%20b%2Fc%26d%3De%2Bf");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    #[test]
    fn repeats_keys_for_lists() {
        let pairs = [("tags", "a"), ("tags", "b c"), ("op", "allocate")];
        assert_eq!(encode_pairs(&pairs), "tags=a&tags=b%20c&op=allocate");
    }
}
