//! Percent-encoding for query strings, urlencoded bodies and OAuth values.
//!
//! One encoder for all three: RFC 3986 unreserved characters pass, every other
//! byte becomes `%XX`. That is valid in a query string, in an
//! `application/x-www-form-urlencoded` body (space as `%20` is accepted
//! everywhere `+` is) and is exactly what OAuth 1.0a asks for.

/// Percent-encodes everything but `A-Z a-z 0-9 - . _ ~`.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
