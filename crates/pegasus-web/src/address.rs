//! Which addresses `web_fetch` may connect to (DESIGN.md §16 "The web"): public unicast only,
//! unless `web.fetch.allow_private` lets it reach this machine and its networks. Cloud metadata
//! endpoints are refused whatever the setting: they hand out the machine's credentials to
//! anyone who asks, and no page a model should read lives there.
//!
//! An IPv6 address that carries an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
//! `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is judged by the IPv4 address it
//! reaches, so `[::ffff:127.0.0.1]` is loopback and `[::ffff:169.254.169.254]` the metadata
//! endpoint.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not public.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `0.0.0.0/8`, `::`: "this host", which reaches the machine itself.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`), IPv6 unique local `fc00::/7` and the old
    /// site-local `fec0::/10`.
    Private,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// Carrier-grade NAT, `100.64.0.0/10`.
    SharedNat,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// Not routable on the internet: `240.0.0.0/4` (broadcast included), `192.0.0.0/24`,
    /// benchmarking, documentation, discard and tunnel prefixes.
    Reserved,
    /// A cloud provider's instance metadata endpoint (`169.254.169.254`, `fd00:ec2::254`,
    /// `100.100.100.200`, ...): refused even with `allow_private`.
    Metadata,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Unspecified => "an unspecified (this-host) address",
            Class::Loopback => "a loopback address",
            Class::Private => "a private address",
            Class::LinkLocal => "a link-local address",
            Class::SharedNat => "a carrier-grade NAT (100.64.0.0/10) address",
            Class::Multicast => "a multicast address",
            Class::Reserved => "a reserved, non-routable address",
            Class::Metadata => "a cloud metadata endpoint",
        })
    }
}

/// IPv4 metadata endpoints: AWS, GCP, Azure, OpenStack, Oracle (`169.254.169.254`), AWS's DNS
/// and ECS task endpoints, Alibaba (`100.100.100.200`), Oracle's older one.
const METADATA_V4: [Ipv4Addr; 5] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 169, 253),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];

/// AWS's IPv6 metadata endpoint, `fd00:ec2::254`.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254);

/// Host names of metadata endpoints, refused before any lookup (a resolver inside the cloud
/// answers them with the addresses above; one outside may answer anything).
const METADATA_NAMES: [&str; 6] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.internal",
];

/// What kind of non-public address `ip` is; `None` for a public unicast address.
pub fn classify(ip: IpAddr) -> Option<Class> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Class> {
    let [a, b, c, _] = ip.octets();
    if METADATA_V4.contains(&ip) {
        return Some(Class::Metadata);
    }
    Some(match (a, b, c) {
        (0, _, _) => Class::Unspecified,
        (127, _, _) => Class::Loopback,
        (10, _, _) | (192, 168, _) => Class::Private,
        (172, b, _) if (16..32).contains(&b) => Class::Private,
        (169, 254, _) => Class::LinkLocal,
        (100, b, _) if (64..128).contains(&b) => Class::SharedNat,
        (224..=239, _, _) => Class::Multicast,
        (240..=255, _, _) => Class::Reserved,
        // IETF protocol assignments, TEST-NETs 1-3, benchmarking, 6to4 relay anycast.
        (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (192, 88, 99) => {
            Class::Reserved
        }
        (198, 18 | 19, _) => Class::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Class> {
    if ip == METADATA_V6 {
        return Some(Class::Metadata);
    }
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some(Class::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Class::Loopback);
    }
    Some(match s[0] {
        x if x & 0xfe00 == 0xfc00 => Class::Private,
        x if x & 0xffc0 == 0xfec0 => Class::Private,
        x if x & 0xffc0 == 0xfe80 => Class::LinkLocal,
        x if x & 0xff00 == 0xff00 => Class::Multicast,
        // Discard-only `100::/64`, documentation `2001:db8::/32`, Teredo `2001::/32` (its
        // client address is hidden in the bits), ORCHIDs `2001:10::/28` and `2001:20::/28`.
        0x0100 if s[1..4] == [0, 0, 0] => Class::Reserved,
        0x2001 if s[1] == 0x0db8 || s[1] == 0 => Class::Reserved,
        0x2001 if (0x10..0x30).contains(&s[1]) => Class::Reserved,
        // The rest of `::/8` (below the mapped and compatible forms handled above).
        0 => Class::Reserved,
        _ => return None,
    })
}

/// The IPv4 address an IPv6 one reaches, if it carries one: IPv4-mapped `::ffff:0:0/96`,
/// IPv4-compatible `::/96` (not `::` or `::1`), NAT64 `64:ff9b::/96`, 6to4 `2002::/16`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        [0, 0, 0, 0, 0, 0, hi, lo] if !(hi == 0 && lo <= 1) => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// Whether `host` (a URL's host, lowercased, without brackets) names a metadata endpoint.
pub fn metadata_name(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    METADATA_NAMES.contains(&host)
}

/// Why `web_fetch` may not connect to `ip`, or `None` when it may: a public address, or any
/// but a metadata endpoint when `allow_private` is set.
pub fn refusal(ip: IpAddr, allow_private: bool) -> Option<Class> {
    match classify(ip)? {
        Class::Metadata => Some(Class::Metadata),
        _ if allow_private => None,
        class => Some(class),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Every class, in IPv4 and its IPv6 spellings, and public addresses on either side of
    /// each range's edges.
    #[test]
    fn every_address_class() {
        use Class::*;
        let table: &[(&str, Option<Class>)] = &[
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("192.168.1.1", Some(Private)),
            ("192.169.0.1", None),
            ("169.254.1.1", Some(LinkLocal)),
            ("169.254.169.254", Some(Metadata)),
            ("169.254.170.2", Some(Metadata)),
            ("100.100.100.200", Some(Metadata)),
            ("100.64.0.1", Some(SharedNat)),
            ("100.127.255.255", Some(SharedNat)),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("255.255.255.255", Some(Reserved)),
            ("192.0.2.1", Some(Reserved)),
            ("198.18.0.1", Some(Reserved)),
            ("8.8.8.8", None),
            ("93.184.215.14", None),
            ("1.1.1.1", None),
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("fc00::1", Some(Private)),
            ("fd12:3456::1", Some(Private)),
            ("fec0::1", Some(Private)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("ff02::1", Some(Multicast)),
            ("fd00:ec2::254", Some(Metadata)),
            ("2001:db8::1", Some(Reserved)),
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001:82b::200e", None),
            // IPv4-mapped, -compatible, NAT64 and 6to4 forms are judged by their IPv4 address.
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:169.254.169.254", Some(Metadata)),
            ("::ffff:169.254.0.1", Some(LinkLocal)),
            ("::ffff:100.64.0.1", Some(SharedNat)),
            ("::ffff:0.0.0.0", Some(Unspecified)),
            ("::ffff:224.0.0.1", Some(Multicast)),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some(Loopback)),
            ("::8.8.8.8", None),
            ("64:ff9b::7f00:1", Some(Loopback)),
            ("64:ff9b::a9fe:a9fe", Some(Metadata)),
            ("64:ff9b::808:808", None),
            ("2002:7f00:1::", Some(Loopback)),
            ("2002:c0a8:101::1", Some(Private)),
            ("2002:808:808::1", None),
        ];
        for (text, want) in table {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(classify(ip), *want, "{text}");
        }
    }

    #[test]
    fn allow_private_opens_everything_but_metadata() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(refusal(ip("127.0.0.1"), false), Some(Class::Loopback));
        assert_eq!(refusal(ip("127.0.0.1"), true), None);
        assert_eq!(refusal(ip("::ffff:10.0.0.1"), true), None);
        assert_eq!(refusal(ip("8.8.8.8"), false), None);
        assert_eq!(refusal(ip("169.254.169.254"), true), Some(Class::Metadata));
        assert_eq!(refusal(ip("fd00:ec2::254"), true), Some(Class::Metadata));
        assert_eq!(
            refusal(ip("::ffff:169.254.169.254"), true),
            Some(Class::Metadata)
        );
    }

    #[test]
    fn metadata_names_are_known() {
        assert!(metadata_name("metadata.google.internal"));
        assert!(metadata_name("metadata.google.internal."));
        assert!(metadata_name("metadata"));
        assert!(!metadata_name("docs.rs"));
    }
}
