//! The typed view of the config fields talosbox acts on today, as validated newtypes: a
//! controller or the API reads `MachineView` and never sees a malformed token, hostname or PEM
//! block. Values are checked here, where they enter, and nowhere deeper. Secrets in the view
//! (the token, the CA key) never print through `Debug`.

use std::fmt;
use std::net::IpAddr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::ConfigError;
use super::document::Config;
use super::value::{Path, Value};

/// The role of a node (`machine.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineType {
    /// A control-plane node that also bootstraps (deprecated in Talos, still accepted).
    Init,
    ControlPlane,
    Worker,
}

impl MachineType {
    pub fn as_str(self) -> &'static str {
        match self {
            MachineType::Init => "init",
            MachineType::ControlPlane => "controlplane",
            MachineType::Worker => "worker",
        }
    }

    /// Init and control-plane nodes hold the CA key and sign for workers.
    pub fn is_control_plane(self) -> bool {
        matches!(self, MachineType::Init | MachineType::ControlPlane)
    }
}

impl TryFrom<&str> for MachineType {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        match s {
            "init" => Ok(MachineType::Init),
            "controlplane" => Ok(MachineType::ControlPlane),
            // "join" is the old name of worker; Talos still reads it.
            "worker" | "join" => Ok(MachineType::Worker),
            other => Err(format!("unknown machine type {other:?} (one of init, controlplane, worker)")),
        }
    }
}

/// The trustd join token (`machine.token`). Its text is only reachable through [`Token::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the token has the shape Talos generates (`[a-z0-9]{6}.[a-z0-9]{16}`).
    pub fn is_talos_shape(&self) -> bool {
        let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        matches!(self.0.split_once('.'), Some((a, b)) if ok(a, 6) && ok(b, 16))
    }
}

impl TryFrom<&str> for Token {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("must not be empty".into());
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("must be printable ASCII without spaces".into());
        }
        Ok(Token(s.to_string()))
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// One PEM block as text (`-----BEGIN CERTIFICATE-----` ...), checked to decode.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem {
    text: Vec<u8>,
    label: String,
}

impl Pem {
    /// Reads the base64 encoding of a PEM block, the form Talos configs carry.
    pub fn from_base64(encoded: &str) -> Result<Pem, String> {
        let compact: String = encoded.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let text = STANDARD.decode(compact.as_bytes()).map_err(|e| format!("not base64: {e}"))?;
        Pem::from_text(text)
    }

    /// Reads PEM text.
    pub fn from_text(text: Vec<u8>) -> Result<Pem, String> {
        let s = std::str::from_utf8(&text).map_err(|_| "not PEM: not text".to_string())?;
        let mut lines = s.lines().map(str::trim_end);
        let label = lines
            .by_ref()
            .find_map(|l| l.strip_prefix("-----BEGIN ").and_then(|r| r.strip_suffix("-----")))
            .ok_or("not PEM: no BEGIN line")?
            .to_string();
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut ended = false;
        for line in lines {
            if line == end {
                ended = true;
                break;
            }
            // RFC 1421 headers ("Proc-Type: ...") are not part of the data.
            if !line.contains(':') {
                body.push_str(line.trim());
            }
        }
        if !ended {
            return Err(format!("not PEM: no END line for {label}"));
        }
        match STANDARD.decode(body.as_bytes()) {
            Ok(der) if !der.is_empty() => Ok(Pem { text, label }),
            Ok(_) => Err(format!("not PEM: empty {label}")),
            Err(e) => Err(format!("not PEM: {label} body is not base64: {e}")),
        }
    }

    /// The block's label: `CERTIFICATE`, `EC PRIVATE KEY`, ...
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The PEM text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.text
    }

    fn is_private_key(&self) -> bool {
        self.label.ends_with("PRIVATE KEY")
    }
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_private_key() {
            write!(f, "Pem({}, <redacted>)", self.label)
        } else {
            write!(f, "Pem({}, {} bytes)", self.label, self.text.len())
        }
    }
}

/// A CA certificate and, on nodes that sign, its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertAndKey {
    pub crt: Pem,
    pub key: Option<Pem>,
}

/// An extra subject alternative name for the node's API certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSan {
    Ip(IpAddr),
    Dns(String),
}

impl TryFrom<&str> for CertSan {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        if let Ok(ip) = s.parse() {
            return Ok(CertSan::Ip(ip));
        }
        let name = s.strip_prefix("*.").unwrap_or(s);
        if is_dns_name(name) {
            Ok(CertSan::Dns(s.to_string()))
        } else {
            Err(format!("{s:?} is neither an IP address nor a DNS name"))
        }
    }
}

/// Labels of letters, digits, `-` and `_`, dot-separated, as Talos checks DNS names.
fn is_dns_name(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
        })
}

/// A host name (RFC 1123: dot-separated labels of letters, digits and inner hyphens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostname(String);

impl Hostname {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Hostname {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        let label_ok = |l: &str| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
                && b.first() != Some(&b'-')
                && b.last() != Some(&b'-')
        };
        if s.is_empty() || s.len() > 253 || !s.split('.').all(label_ok) {
            return Err(format!(
                "{s:?} is not a valid hostname (labels of letters, digits and inner '-', up to 63 characters each)"
            ));
        }
        Ok(Hostname(s.to_string()))
    }
}

/// An NTP server: an IP address or a DNS name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeServer(String);

impl TimeServer {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for TimeServer {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        if s.parse::<IpAddr>().is_ok() || is_dns_name(s) {
            Ok(TimeServer(s.to_string()))
        } else {
            Err(format!("{s:?} is neither an IP address nor a DNS name"))
        }
    }
}

/// The cluster's control-plane endpoint, an `https://host:port` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    url: String,
    host: String,
    port: Option<u16>,
}

impl Endpoint {
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// The host part, without brackets for IPv6.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl TryFrom<&str> for Endpoint {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{s:?} is not an http(s) URL: {why}");
        let rest = s
            .strip_prefix("https://")
            .or_else(|| s.strip_prefix("http://"))
            .ok_or_else(|| bad("no http:// or https://"))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || !(host.parse::<IpAddr>().is_ok() || is_dns_name(host)) {
            return Err(bad("no valid host"));
        }
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| bad("bad port"))?),
        };
        Ok(Endpoint { url: s.to_string(), host: host.to_string(), port })
    }
}

/// `machine.install`: where and what to install.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Install {
    pub disk: Option<String>,
    pub image: Option<String>,
    pub wipe: bool,
}

/// The fields of the v1alpha1 document talosbox acts on, typed and checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachineView {
    pub machine_type: Option<MachineType>,
    pub token: Option<Token>,
    pub ca: Option<CertAndKey>,
    pub accepted_cas: Vec<Pem>,
    pub cert_sans: Vec<CertSan>,
    pub hostname: Option<Hostname>,
    pub install: Install,
    pub debug: bool,
    /// Read to generate talosconfigs; the cluster itself is out of scope.
    pub cluster_name: Option<String>,
    pub control_plane_endpoint: Option<Endpoint>,
    pub time_servers: Vec<TimeServer>,
    pub nameservers: Vec<IpAddr>,
}

/// Reads the typed fields one path at a time, so that each error names its field.
struct Reader<'a> {
    root: &'a Value,
}

impl Reader<'_> {
    fn invalid(path: &Path, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { doc: "v1alpha1".into(), path: path.to_string(), reason: reason.into() }
    }

    fn str(&self, path: &Path) -> Option<&str> {
        self.root.at(path).and_then(Value::as_str).filter(|s| !s.is_empty())
    }

    fn parse<T: for<'s> TryFrom<&'s str, Error = String>>(&self, dotted: &str) -> Result<Option<T>, ConfigError> {
        let path = Path::keys(dotted);
        self.str(&path).map(|s| T::try_from(s).map_err(|e| Self::invalid(&path, e))).transpose()
    }

    fn list<T: for<'s> TryFrom<&'s str, Error = String>>(&self, dotted: &str) -> Result<Vec<T>, ConfigError> {
        let path = Path::keys(dotted);
        let items = self.root.at(&path).and_then(Value::as_list).unwrap_or_default();
        items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_str().map(|s| (i, s)))
            .map(|(i, s)| T::try_from(s).map_err(|e| Self::invalid(&path.index(i), e)))
            .collect()
    }

    fn pem(&self, path: &Path, want_key: bool) -> Result<Option<Pem>, ConfigError> {
        let Some(encoded) = self.str(path) else { return Ok(None) };
        let pem = Pem::from_base64(encoded).map_err(|e| Self::invalid(path, e))?;
        match (want_key, pem.is_private_key(), pem.label() == "CERTIFICATE") {
            (true, true, _) | (false, _, true) => Ok(Some(pem)),
            (true, false, _) => Err(Self::invalid(path, format!("expected a private key, got {}", pem.label()))),
            (false, _, false) => Err(Self::invalid(path, format!("expected a CERTIFICATE, got {}", pem.label()))),
        }
    }

    fn bool(&self, dotted: &str) -> bool {
        self.root.at(&Path::keys(dotted)).and_then(Value::as_bool).unwrap_or(false)
    }
}

impl Config {
    /// The typed view of the v1alpha1 document; an empty view when there is none. The
    /// cluster's name and endpoint come from v1alpha1's `cluster` section or, as Talos's newer
    /// generated configs write them, from the `KubeClusterConfig` document.
    pub fn machine(&self) -> Result<MachineView, ConfigError> {
        let mut view = self.v1alpha1_view()?;
        if let Some(doc) = self.find("KubeClusterConfig", None) {
            let r = Reader { root: doc.value() };
            if view.cluster_name.is_none() {
                view.cluster_name = r.str(&Path::keys("clusterName")).map(str::to_string);
            }
            if view.control_plane_endpoint.is_none() {
                view.control_plane_endpoint = r.parse("endpoint")?;
            }
        }
        Ok(view)
    }

    fn v1alpha1_view(&self) -> Result<MachineView, ConfigError> {
        let Some(doc) = self.v1alpha1() else { return Ok(MachineView::default()) };
        let r = Reader { root: doc.value() };

        let ca_crt = r.pem(&Path::keys("machine.ca.crt"), false)?;
        let ca_key = r.pem(&Path::keys("machine.ca.key"), true)?;
        let ca = match (ca_crt, ca_key) {
            (Some(crt), key) => Some(CertAndKey { crt, key }),
            (None, None) => None,
            (None, Some(_)) => {
                return Err(Reader::invalid(&Path::keys("machine.ca.crt"), "a CA key needs its certificate"));
            }
        };
        let accepted = Path::keys("machine.acceptedCAs");
        let accepted_count = doc.value().at(&accepted).and_then(Value::as_list).map_or(0, <[Value]>::len);
        let mut accepted_cas = Vec::new();
        for i in 0..accepted_count {
            if let Some(pem) = r.pem(&accepted.index(i).key("crt"), false)? {
                accepted_cas.push(pem);
            }
        }

        Ok(MachineView {
            machine_type: r.parse("machine.type")?,
            token: r.parse("machine.token")?,
            ca,
            accepted_cas,
            cert_sans: r.list("machine.certSANs")?,
            hostname: r.parse("machine.network.hostname")?,
            install: Install {
                disk: r.str(&Path::keys("machine.install.disk")).map(str::to_string),
                image: r.str(&Path::keys("machine.install.image")).map(str::to_string),
                wipe: r.bool("machine.install.wipe"),
            },
            debug: r.bool("debug"),
            cluster_name: r.str(&Path::keys("cluster.clusterName")).map(str::to_string),
            control_plane_endpoint: r.parse("cluster.controlPlane.endpoint")?,
            time_servers: r.list("machine.time.servers")?,
            nameservers: r.list::<IpText>("machine.network.nameservers")?.into_iter().map(|ip| ip.0).collect(),
        })
    }
}

/// An IP address read from text, for the generic list reader.
struct IpText(IpAddr);

impl TryFrom<&str> for IpText {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        s.parse().map(IpText).map_err(|_| format!("{s:?} is not an IP address"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;

    #[test]
    fn newtypes_accept_and_refuse() {
        assert_eq!(MachineType::try_from("join"), Ok(MachineType::Worker));
        assert!(MachineType::try_from("master").is_err());

        assert!(Token::try_from("abcdef.0123456789abcdef").unwrap().is_talos_shape());
        assert!(!Token::try_from("my-own-token").unwrap().is_talos_shape());
        assert!(Token::try_from("").is_err());
        assert!(Token::try_from("a b").is_err());
        assert_eq!(format!("{:?}", Token::try_from("secret.value").unwrap()), "Token(<redacted>)");

        for ok in ["node-1", "a.b.c", "x1", "N0DE"] {
            assert!(Hostname::try_from(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "a..b", "a_b", &"x".repeat(64)] {
            assert!(Hostname::try_from(bad).is_err(), "{bad}");
        }

        assert_eq!(CertSan::try_from("10.0.0.1"), Ok(CertSan::Ip("10.0.0.1".parse().unwrap())));
        assert_eq!(CertSan::try_from("::1"), Ok(CertSan::Ip("::1".parse().unwrap())));
        assert!(matches!(CertSan::try_from("*.example.com"), Ok(CertSan::Dns(_))));
        assert!(CertSan::try_from("not a name").is_err());

        let e = Endpoint::try_from("https://[fd00::1]:6443/path").unwrap();
        assert_eq!((e.host(), e.port()), ("fd00::1", Some(6443)));
        assert!(Endpoint::try_from("base:6443").is_err());
        assert!(Endpoint::try_from("https://:6443").is_err());
        assert!(Endpoint::try_from("https://host:99999").is_err());

        assert!(TimeServer::try_from("time.cloudflare.com").is_ok());
        assert!(TimeServer::try_from("ntp server").is_err());
    }

    #[test]
    fn pem_blocks_decode_from_base64() {
        let crt = "-----BEGIN CERTIFICATE-----\nMIIBPjCB8aADAgECAhB9\n-----END CERTIFICATE-----\n";
        let pem = Pem::from_base64(&STANDARD.encode(crt)).unwrap();
        assert_eq!(pem.label(), "CERTIFICATE");
        assert_eq!(pem.as_bytes(), crt.as_bytes());
        assert!(Pem::from_base64("!!!").unwrap_err().starts_with("not base64"));
        assert!(Pem::from_base64(&STANDARD.encode("hello")).unwrap_err().contains("no BEGIN"));
        let open = "-----BEGIN CERTIFICATE-----\nMIIB\n";
        assert!(Pem::from_base64(&STANDARD.encode(open)).unwrap_err().contains("no END"));
        let key = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(
            format!("{:?}", Pem::from_base64(&STANDARD.encode(key)).unwrap()),
            "Pem(EC PRIVATE KEY, <redacted>)"
        );
    }

    #[test]
    fn the_view_reads_talos_configs() {
        let text = include_str!("testdata/talos/v1.15/overrides-controlplane.yaml");
        let view = load(text).unwrap().config.machine().unwrap();
        assert_eq!(view.machine_type, Some(MachineType::ControlPlane));
        assert_eq!(view.token.as_ref().map(Token::expose), Some("d8cwfa.eyvpi0xwxyarbfid"));
        let ca = view.ca.unwrap();
        assert_eq!(ca.crt.label(), "CERTIFICATE");
        assert_eq!(ca.key.unwrap().label(), "ED25519 PRIVATE KEY");
        assert_eq!(view.cert_sans, [CertSan::Dns("foo".into()), CertSan::Dns("bar".into())]);
        assert!(!view.debug);

        let text = "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: w1\n    nameservers: [1.1.1.1, '::1']\n\
                    \x20 install:\n    disk: /dev/vda\n    image: ghcr.io/x/installer:v1\n    wipe: true\n  time:\n    servers: [pool.ntp.org]\n\
                    cluster:\n  clusterName: demo\n  controlPlane:\n    endpoint: https://10.5.0.2:6443\n";
        let view = load(text).unwrap().config.machine().unwrap();
        assert_eq!(view.hostname.as_ref().map(Hostname::as_str), Some("w1"));
        assert_eq!(view.nameservers.len(), 2);
        assert_eq!(view.install.disk.as_deref(), Some("/dev/vda"));
        assert!(view.install.wipe);
        assert_eq!(view.time_servers[0].as_str(), "pool.ntp.org");
        assert_eq!(view.cluster_name.as_deref(), Some("demo"));
        assert_eq!(view.control_plane_endpoint.unwrap().port(), Some(6443));
    }

    #[test]
    fn bad_values_name_their_path() {
        let cases: &[(&str, &str)] = &[
            (
                "machine:\n  network:\n    hostname: -bad\n",
                "v1alpha1: machine.network.hostname: \"-bad\" is not a valid hostname",
            ),
            (
                "machine:\n  certSANs: [ok, 'not ok']\n",
                "v1alpha1: machine.certSANs[1]: \"not ok\" is neither an IP address nor a DNS name",
            ),
            (
                "machine:\n  network:\n    nameservers: [dns.google]\n",
                "v1alpha1: machine.network.nameservers[0]: \"dns.google\" is not an IP address",
            ),
            ("machine:\n  ca:\n    crt: bm9wZQ==\n", "v1alpha1: machine.ca.crt: not PEM: no BEGIN line"),
            (
                "machine:\n  type: master\n",
                "v1alpha1: machine.type: unknown machine type \"master\" (one of init, controlplane, worker)",
            ),
        ];
        for (text, want) in cases {
            let err = load(text).unwrap().config.machine().unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
        }
    }

    #[test]
    fn the_cluster_endpoint_comes_from_kube_cluster_config_too() {
        let text = "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: KubeClusterConfig\nclusterName: demo\nendpoint: https://10.5.0.2:6443\n";
        let view = crate::config::load(text).unwrap().config.machine().unwrap();
        assert_eq!(view.cluster_name.as_deref(), Some("demo"));
        assert_eq!(view.control_plane_endpoint.unwrap().host(), "10.5.0.2");
    }
}
