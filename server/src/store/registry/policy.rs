//! Pure policy for registry traffic: which addresses count as public, which redirects and auth
//! realms may be followed (anchors.md §1: pull SSRF, CVE-2025-51471 realm token leak), how a blob
//! is split into download parts, and the retry backoff. No I/O here, so every rule is table-tested.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use url::Url;

/// Ollama's part sizing: size/16, clamped to 100 MB – 1000 MB.
pub const MIN_PART_SIZE: u64 = 100_000_000;
pub const MAX_PART_SIZE: u64 = 1_000_000_000;
/// Parts of one blob fetched at once.
pub const MAX_PARTS_IN_FLIGHT: usize = 16;

/// True iff `ip` is a globally routable unicast address: not loopback, private (RFC 1918, ULA),
/// link-local (incl. 169.254.169.254 cloud metadata), CGNAT, unspecified, multicast, broadcast,
/// documentation, benchmarking or reserved ranges. IPv4-mapped/compatible v6 is judged as v4.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            is_public_v6(v6)
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64/10 CGNAT
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24 protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18/15 benchmarking
        || o[0] >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // fc00::/7 unique local
        || (s[0] & 0xffc0) == 0xfe80 // fe80::/10 link local
        || (s[0] & 0xffc0) == 0xfec0 // fec0::/10 site local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64 may embed private v4
        || s[..6] == [0, 0, 0, 0, 0, 0]) // ::/96 v4-compatible
}

/// Where a registry answered from: decides how far its redirects may reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Every resolved address of the registry host is public.
    Public,
    /// The registry resolves to (some) loopback/private address: only same-host redirects.
    Private,
}

/// What to do with a redirect `Location`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redirect {
    /// Same scheme, host and port: keep our credentials and client.
    SameHost,
    /// Another host: follow without Authorization, through the public-only resolver.
    External,
}

/// Judges a redirect from `from` (a registry URL) to `to`. Cross-host targets must be https, the
/// registry must itself be public, and an IP-literal target must be public (a named target is
/// re-checked on its resolved addresses at connect time by the public-only resolver).
pub fn redirect(from: &Url, to: &Url, origin: Origin) -> Result<Redirect, String> {
    if !matches!(to.scheme(), "http" | "https") {
        return Err(format!("redirect to unsupported scheme {:?}", to.scheme()));
    }
    if !to.username().is_empty() || to.password().is_some() {
        return Err("redirect carries credentials".into());
    }
    if same_host(from, to) {
        if from.scheme() == "https" && to.scheme() != "https" {
            return Err("redirect downgrades https to http".into());
        }
        return Ok(Redirect::SameHost);
    }
    let host = to.host_str().unwrap_or_default();
    if origin == Origin::Private {
        return Err(format!(
            "refusing redirect to another host ({host}) from a private or loopback registry"
        ));
    }
    if to.scheme() != "https" {
        return Err(format!("refusing cross-host redirect to non-https {host}"));
    }
    if let Some(ip) = literal_ip(to) {
        if !is_public(ip) {
            return Err(format!("refusing redirect to non-public address {ip}"));
        }
    } else if is_local_name(host) {
        return Err(format!("refusing redirect to local host name {host}"));
    }
    Ok(Redirect::External)
}

/// An auth realm must be on exactly the host (and port) we were talking to, so a token or key
/// signature is never sent elsewhere (CVE-2025-51471); http is only allowed when the registry
/// itself is http.
pub fn realm_allowed(request: &Url, realm: &Url) -> Result<(), String> {
    if !same_host(request, realm) {
        return Err(format!(
            "realm host {:?} does not match original host {:?}",
            host_port(realm),
            host_port(request)
        ));
    }
    if request.scheme() == "https" && realm.scheme() != "https" {
        return Err("realm downgrades https to http".into());
    }
    Ok(())
}

fn host_port(u: &Url) -> String {
    match u.port() {
        Some(p) => format!("{}:{p}", u.host_str().unwrap_or_default()),
        None => u.host_str().unwrap_or_default().to_owned(),
    }
}

/// Scheme-independent host equality including the effective port (so http://h → https://h:443
/// is not "same host" with http://h:80).
fn same_host(a: &Url, b: &Url) -> bool {
    a.host_str().map(str::to_ascii_lowercase) == b.host_str().map(str::to_ascii_lowercase)
        && a.port_or_known_default() == b.port_or_known_default()
}

fn literal_ip(u: &Url) -> Option<IpAddr> {
    match u.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// Names that resolve locally regardless of DNS.
fn is_local_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost"
        || h.ends_with(".localhost")
        || h.ends_with(".local")
        || h.ends_with(".internal")
}

/// Part size for a blob of `total` bytes, given the clamp bounds (`MIN/MAX_PART_SIZE` in
/// production; tests shrink them). Never 0.
pub fn part_size(total: u64, min: u64, max: u64) -> u64 {
    (total / 16).clamp(min.max(1), max.max(min).max(1))
}

/// `(offset, size)` of each part covering `0..total`.
pub fn parts(total: u64, size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < total {
        let n = size.min(total - off);
        out.push((off, n));
        off += n;
    }
    out
}

/// Delay before retry `attempt` (0-based): `base * 2^attempt`, capped at 64×base.
pub fn backoff(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.min(6))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn public_address_table() {
        let cases = [
            ("8.8.8.8", true),
            ("104.18.0.1", true),
            ("2606:4700::1", true),
            ("127.0.0.1", false),
            ("127.0.0.2", false),
            ("10.1.2.3", false),
            ("172.16.0.1", false),
            ("192.168.1.1", false),
            ("169.254.169.254", false),
            ("100.64.0.1", false),
            ("0.0.0.0", false),
            ("255.255.255.255", false),
            ("224.0.0.1", false),
            ("198.18.0.1", false),
            ("192.0.2.1", false),
            ("240.0.0.1", false),
            ("::1", false),
            ("::", false),
            ("fe80::1", false),
            ("fd00::1", false),
            ("fd00:ec2::254", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:169.254.169.254", false),
            ("::ffff:8.8.8.8", true),
            ("::127.0.0.1", false),
            ("64:ff9b::a9fe:a9fe", false),
            ("2001:db8::1", false),
        ];
        for (ip, want) in cases {
            assert_eq!(is_public(ip.parse().unwrap()), want, "{ip}");
        }
    }

    #[test]
    fn redirect_table() {
        use Origin::*;
        let reg = u("https://registry.ollama.ai/v2/library/m/blobs/sha256:x");
        let local = u("http://127.0.0.1:5000/v2/library/m/blobs/sha256:x");
        let ok_ext = Ok(Redirect::External);
        let cases: Vec<(&Url, &str, Origin, Result<Redirect, ()>)> = vec![
            (
                &reg,
                "https://registry.ollama.ai/other",
                Public,
                Ok(Redirect::SameHost),
            ),
            (
                &reg,
                "https://REGISTRY.ollama.ai:443/x",
                Public,
                Ok(Redirect::SameHost),
            ),
            (&reg, "https://cdn.example.com/blob", Public, ok_ext.clone()),
            (&reg, "https://104.18.0.1/blob", Public, ok_ext),
            (&reg, "http://cdn.example.com/blob", Public, Err(())),
            (&reg, "http://registry.ollama.ai/x", Public, Err(())),
            (&reg, "https://127.0.0.1/x", Public, Err(())),
            (&reg, "https://127.0.0.2:5000/x", Public, Err(())),
            (
                &reg,
                "https://169.254.169.254/latest/meta-data",
                Public,
                Err(()),
            ),
            (&reg, "https://[::1]/x", Public, Err(())),
            (&reg, "https://[::ffff:10.0.0.1]/x", Public, Err(())),
            (&reg, "https://10.0.0.1/x", Public, Err(())),
            (&reg, "https://localhost/x", Public, Err(())),
            (&reg, "https://metadata.google.internal/x", Public, Err(())),
            (&reg, "https://user:pw@cdn.example.com/x", Public, Err(())),
            (&reg, "file:///etc/passwd", Public, Err(())),
            (&reg, "https://cdn.example.com/blob", Private, Err(())),
            (
                &local,
                "http://127.0.0.1:5000/elsewhere",
                Private,
                Ok(Redirect::SameHost),
            ),
            (&local, "http://127.0.0.1:5001/x", Private, Err(())),
            (&local, "http://127.0.0.2:5000/x", Private, Err(())),
            (&local, "https://cdn.example.com/x", Private, Err(())),
            (&local, "http://169.254.169.254/x", Private, Err(())),
        ];
        for (from, to, origin, want) in cases {
            let got = redirect(from, &u(to), origin);
            match want {
                Ok(w) => assert_eq!(got, Ok(w), "{from} -> {to}"),
                Err(()) => assert!(got.is_err(), "{from} -> {to}: {got:?}"),
            }
        }
    }

    #[test]
    fn realm_table() {
        let req = u("https://registry.ollama.ai/v2/library/m/manifests/latest");
        assert!(realm_allowed(&req, &u("https://registry.ollama.ai/v2/token")).is_ok());
        let err = realm_allowed(&req, &u("https://evil.example/token")).unwrap_err();
        assert_eq!(
            err,
            "realm host \"evil.example\" does not match original host \"registry.ollama.ai\""
        );
        assert!(realm_allowed(&req, &u("http://registry.ollama.ai/token")).is_err());
        assert!(realm_allowed(&req, &u("https://registry.ollama.ai:8443/token")).is_err());
        let local = u("http://127.0.0.1:5000/v2/x");
        assert!(realm_allowed(&local, &u("http://127.0.0.1:5000/token")).is_ok());
        assert!(realm_allowed(&local, &u("http://127.0.0.2:5000/token")).is_err());
        assert!(realm_allowed(&local, &u("http://localhost:5000/token")).is_err());
    }

    #[test]
    fn part_sizing_matches_ollama() {
        assert_eq!(part_size(10, MIN_PART_SIZE, MAX_PART_SIZE), MIN_PART_SIZE);
        assert_eq!(
            part_size(3_200_000_000, MIN_PART_SIZE, MAX_PART_SIZE),
            200_000_000
        );
        assert_eq!(
            part_size(40_000_000_000, MIN_PART_SIZE, MAX_PART_SIZE),
            MAX_PART_SIZE
        );
        assert_eq!(part_size(0, 0, 0), 1);
        assert_eq!(parts(0, 10), vec![]);
        assert_eq!(parts(25, 10), vec![(0, 10), (10, 10), (20, 5)]);
        assert_eq!(parts(20, 10), vec![(0, 10), (10, 10)]);
        let big = parts(
            40_000_000_000,
            part_size(40_000_000_000, MIN_PART_SIZE, MAX_PART_SIZE),
        );
        assert_eq!(big.len(), 40);
        assert_eq!(big.iter().map(|p| p.1).sum::<u64>(), 40_000_000_000);
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Duration::from_secs(1);
        assert_eq!(backoff(b, 0), Duration::from_secs(1));
        assert_eq!(backoff(b, 3), Duration::from_secs(8));
        assert_eq!(backoff(b, 40), Duration::from_secs(64));
    }
}
