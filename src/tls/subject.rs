//! The subject's common name (CN) of an X.509 certificate, for `tls.auth_clients_user: CN`.
//! A short DER walk: rustls has checked the certificate already, so it is well-formed; any
//! surprise gives `None`, never a wrong name.

/// DER encoding of the attribute type `id-at-commonName` (2.5.4.3).
const COMMON_NAME_OID: &[u8] = &[0x55, 0x04, 0x03];
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// `[0] EXPLICIT Version` at the head of a TBSCertificate.
const VERSION_TAG: u8 = 0xa0;
/// String types a CN may use: UTF8String, PrintableString, IA5String.
const STRING_TAGS: &[u8] = &[0x0c, 0x13, 0x16];

/// The last CN of `cert_der`'s subject (as OpenSSL reports the most specific one), if any.
pub fn common_name(cert_der: &[u8]) -> Option<String> {
    let (_, certificate, _) = element(cert_der)?;
    let (_, mut tbs, _) = element(certificate)?;
    if tbs.first() == Some(&VERSION_TAG) {
        tbs = element(tbs)?.2;
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        tbs = element(tbs)?.2;
    }
    let (tag, mut subject, _) = element(tbs)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut name = None;
    while !subject.is_empty() {
        let (tag, mut set, rest) = element(subject)?;
        subject = rest;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (_, attribute, rest) = element(set)?;
            set = rest;
            let (tag, oid, value) = element(attribute)?;
            if tag == OID && oid == COMMON_NAME_OID {
                let (tag, text, _) = element(value)?;
                if STRING_TAGS.contains(&tag) {
                    name = Some(String::from_utf8(text.to_vec()).ok()?);
                }
            }
        }
    }
    name
}

/// Splits one DER element off `input`: its tag, its content, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        let len = bytes
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, rest)
    };
    (rest.len() >= len).then(|| {
        let (content, after) = rest.split_at(len);
        (tag, content, after)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of `tag` around `content`.
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x82);
            out.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(content);
        out
    }

    fn name(attributes: &[(&[u8], &str)]) -> Vec<u8> {
        let mut sets = Vec::new();
        for (oid, value) in attributes {
            let attribute = [der(OID, oid), der(0x0c, value.as_bytes())].concat();
            sets.extend(der(SET, &der(SEQUENCE, &attribute)));
        }
        der(SEQUENCE, &sets)
    }

    fn certificate(subject: &[u8], with_version: bool) -> Vec<u8> {
        let mut tbs = Vec::new();
        if with_version {
            tbs.extend(der(VERSION_TAG, &der(0x02, &[2])));
        }
        tbs.extend(der(0x02, &[1; 20])); // serial
        tbs.extend(der(SEQUENCE, &der(OID, &[0x2a, 0x86]))); // algorithm
        tbs.extend(name(&[(COMMON_NAME_OID, "Issuer CA")]));
        tbs.extend(der(SEQUENCE, &[0x17, 0x01, b'x', 0x17, 0x01, b'y'])); // validity
        tbs.extend_from_slice(subject);
        tbs.extend(der(SEQUENCE, &[0; 200])); // a long public key
        der(
            SEQUENCE,
            &[der(SEQUENCE, &tbs), der(SEQUENCE, &[0; 10])].concat(),
        )
    }

    #[test]
    fn reads_the_subjects_common_name_not_the_issuers() {
        let subject = name(&[(&[0x55, 0x04, 0x0a], "Org"), (COMMON_NAME_OID, "alice")]);
        for with_version in [true, false] {
            let cert = certificate(&subject, with_version);
            assert_eq!(common_name(&cert).as_deref(), Some("alice"));
        }
        let no_cn = name(&[(&[0x55, 0x04, 0x0a], "Org")]);
        assert_eq!(common_name(&certificate(&no_cn, true)), None);
        assert_eq!(common_name(b"\x30\x05\x30"), None, "truncated");
        assert_eq!(common_name(b""), None);
    }
}
