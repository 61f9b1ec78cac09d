//! A TPM 2.0 client for sealing a secret to PCR values: the commands go through the kernel's
//! resource manager (`/dev/tpmrm0`), or any byte stream speaking the TPM command wire format
//! (swtpm's socket interface in the tests), marshalled by the `tpm2-protocol` crate.
//!
//! Sealing creates the owner hierarchy's ECC P-256 storage key (the TCG SRK template, so the
//! same key is derived again on every boot without being stored), reads the policy digest of
//! `PolicyPCR` over the chosen sha256 PCRs in a trial session, and creates under the storage
//! key a keyed-hash object holding the secret whose only authorisation is that policy. Unsealing
//! loads the object under the re-derived storage key, satisfies `PolicyPCR` in a policy session
//! and asks for the data; when the PCRs have moved, the session's digest differs from the one
//! sealed to and the client says so before the TPM refuses.

use std::fs::OpenOptions;
use std::io::{Read, Write};

use tpm2_protocol::basic::{TpmHandle, TpmUint16};
use tpm2_protocol::data::{
    Tpm2bAuth, Tpm2bDigest, Tpm2bEccParameter, Tpm2bNonce, Tpm2bPrivate, Tpm2bPublic, Tpm2bSensitiveCreate,
    Tpm2bSensitiveData, TpmAlgId, TpmEccCurve, TpmSe, TpmSt, TpmaObject, TpmaSession, TpmlDigestValues,
    TpmlPcrSelection, TpmsAuthCommand, TpmsEccParms, TpmsEccPoint, TpmsKeyedhashParms, TpmsPcrSelect, TpmsPcrSelection,
    TpmsSensitiveCreate, TpmtEccScheme, TpmtHa, TpmtKdfScheme, TpmtKeyedhashScheme, TpmtPublic, TpmtSymDef,
    TpmuAsymScheme, TpmuHa, TpmuKdfScheme, TpmuKeyedhashScheme, TpmuPublicId, TpmuPublicParms, TpmuSymKeyBits,
    TpmuSymMode,
};
use tpm2_protocol::frame::{
    TpmCreateCommand, TpmCreatePrimaryCommand, TpmFlushContextCommand, TpmFrame, TpmLoadCommand, TpmPcrExtendCommand,
    TpmPcrReadCommand, TpmPolicyGetDigestCommand, TpmPolicyPcrCommand, TpmResponse, TpmStartAuthSessionCommand,
    TpmUnmarshalBody, TpmUnsealCommand, tpm_marshal_command,
};
use tpm2_protocol::{TpmMarshal, TpmSized, TpmUnmarshal, TpmWriter};
use zeroize::Zeroizing;

/// Where the kernel's TPM resource manager is.
pub const DEVICE: &str = "/dev/tpmrm0";

/// The password authorisation session (an empty password: the owner hierarchy's default).
const TPM_RS_PW: u32 = 0x4000_0009;
const TPM_RH_OWNER: u32 = 0x4000_0001;
const TPM_RH_NULL: u32 = 0x4000_0007;
/// `TPM_RC_POLICY_FAIL`, the format-one code an unsatisfied policy session gives.
const RC_POLICY_FAIL: u32 = 0x09D;
/// The largest command or response exchanged here (the TPM's own limit is 4096 bytes).
const MAX_FRAME: usize = 4096;
/// The PCRs a sha256 bank selection covers (24, three bytes of bits).
pub const PCR_COUNT: u8 = 24;

/// Why a TPM call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no TPM 2.0 device at {DEVICE} ({0}); a tpm key needs one")]
    Absent(std::io::Error),
    #[error("TPM I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("TPM {command}: {detail}")]
    Wire { command: &'static str, detail: String },
    #[error("TPM {command} failed with TPM_RC {code:#x}")]
    Rc { command: &'static str, code: u32 },
    #[error("the PCR values differ from those the key was sealed to (PCRs {0:?})")]
    PcrsMoved(Vec<u8>),
    #[error("the TPM's storage key is not the one the key was sealed under (was the TPM cleared?)")]
    OtherStorageKey,
    #[error("PCR {0} is out of range (0–23)")]
    BadPcr(u8),
    #[error("the sealed object does not parse: {0}")]
    BadBlob(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// What sealing gives back, kept by the caller (in a LUKS2 token) to unseal later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The object's TPM2B_PUBLIC, marshalled.
    pub public: Vec<u8>,
    /// The object's TPM2B_PRIVATE, marshalled (encrypted by the storage key).
    pub private: Vec<u8>,
    /// The sha256 PCRs its policy reads, ascending.
    pub pcrs: Vec<u8>,
    /// The `PolicyPCR` digest the object was sealed to.
    pub policy_hash: Vec<u8>,
    /// The storage key's name at sealing.
    pub key_name: Vec<u8>,
}

/// The byte stream to a TPM.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A TPM 2.0 reached through a byte stream.
pub struct Device {
    io: Box<dyn Stream>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tpm::Device")
    }
}

/// A transient handle flushed when dropped unless it was already.
struct Transient(u32);

impl Device {
    /// Opens the kernel's resource manager; a missing device is [`Error::Absent`].
    pub fn open() -> Result<Device> {
        let file = OpenOptions::new().read(true).write(true).open(DEVICE).map_err(Error::Absent)?;
        Ok(Device { io: Box::new(file) })
    }

    /// A TPM at the other end of `stream` (swtpm's socket data channel, for one).
    pub fn over(stream: impl Stream + 'static) -> Device {
        Device { io: Box::new(stream) }
    }

    fn run<C: TpmFrame, R: TpmUnmarshalBody>(
        &mut self,
        command: &'static str,
        cmd: &C,
        sessions: &[TpmsAuthCommand],
    ) -> Result<R> {
        let wire = |e: tpm2_protocol::TpmError| Error::Wire { command, detail: format!("{e:?}") };
        let mut out = Zeroizing::new(vec![0u8; MAX_FRAME]);
        let len = {
            let mut w = TpmWriter::new(&mut out);
            let tag = if sessions.is_empty() { TpmSt::NoSessions } else { TpmSt::Sessions };
            tpm_marshal_command(cmd, tag, sessions, &mut w).map_err(wire)?;
            w.len()
        };
        self.io.write_all(&out[..len])?;
        self.io.flush()?;
        let mut resp = Zeroizing::new(vec![0u8; MAX_FRAME]);
        let mut have = 0;
        let size = loop {
            let n = self.io.read(&mut resp[have..])?;
            if n == 0 {
                return Err(Error::Wire { command, detail: "the TPM closed the stream mid-response".into() });
            }
            have += n;
            if have >= 10 {
                let size = u32::from_be_bytes([resp[2], resp[3], resp[4], resp[5]]) as usize;
                if !(10..=MAX_FRAME).contains(&size) {
                    return Err(Error::Wire { command, detail: format!("a response of {size} bytes") });
                }
                if have >= size {
                    break size;
                }
            }
        };
        let code = u32::from_be_bytes([resp[6], resp[7], resp[8], resp[9]]);
        if code != 0 {
            return Err(Error::Rc { command, code });
        }
        TpmResponse::cast(&resp[..size]).and_then(|r| r.unmarshal::<R>()).map_err(wire)
    }

    fn flush(&mut self, handle: &mut Transient) {
        if handle.0 == 0 {
            return;
        }
        let cmd = TpmFlushContextCommand { handles: [], flush_handle: TpmHandle::new(handle.0) };
        let r: Result<tpm2_protocol::frame::TpmFlushContextResponse> = self.run("FlushContext", &cmd, &[]);
        if let Err(e) = r {
            tracing::warn!("flushing TPM handle {:#x}: {e}", handle.0);
        }
        handle.0 = 0;
    }

    /// The owner hierarchy's storage key, derived from the TCG template: its handle and name.
    fn storage_key(&mut self) -> Result<(Transient, Vec<u8>)> {
        let cmd = TpmCreatePrimaryCommand {
            handles: [TpmHandle::new(TPM_RH_OWNER)],
            in_sensitive: Tpm2bSensitiveCreate::default(),
            in_public: Tpm2bPublic { inner: srk_template()? },
            outside_info: Default::default(),
            creation_pcr: TpmlPcrSelection::default(),
        };
        let r: tpm2_protocol::frame::TpmCreatePrimaryResponse = self.run("CreatePrimary", &cmd, &[password()])?;
        Ok((Transient(r.handles[0].value()), r.name.to_vec()))
    }

    /// A session of `kind` (trial or policy) with `PolicyPCR` over `pcrs` applied: its handle
    /// and its digest.
    fn pcr_policy(&mut self, kind: TpmSe, pcrs: &[u8]) -> Result<(Transient, Vec<u8>)> {
        let mut nonce = [0u8; 32];
        getrandom::fill(&mut nonce).map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
        let start = TpmStartAuthSessionCommand {
            handles: [TpmHandle::new(TPM_RH_NULL), TpmHandle::new(TPM_RH_NULL)],
            nonce_caller: buffer::<Tpm2bNonce>(&nonce)?,
            encrypted_salt: Default::default(),
            session_type: kind,
            symmetric: TpmtSymDef {
                algorithm: TpmAlgId::Null,
                key_bits: TpmuSymKeyBits::Null,
                mode: TpmuSymMode::Null,
            },
            auth_hash: TpmAlgId::Sha256,
        };
        let r: tpm2_protocol::frame::TpmStartAuthSessionResponse = self.run("StartAuthSession", &start, &[])?;
        let mut session = Transient(r.handles[0].value());
        let outcome = (|| -> Result<_> {
            let policy = TpmPolicyPcrCommand {
                handles: [TpmHandle::new(session.0)],
                pcr_digest: Tpm2bDigest::default(),
                pcrs: selection(pcrs)?,
            };
            let _: tpm2_protocol::frame::TpmPolicyPcrResponse = self.run("PolicyPCR", &policy, &[])?;
            let get = TpmPolicyGetDigestCommand { handles: [TpmHandle::new(session.0)] };
            let d: tpm2_protocol::frame::TpmPolicyGetDigestResponse = self.run("PolicyGetDigest", &get, &[])?;
            Ok(d.policy_digest.to_vec())
        })();
        match outcome {
            Ok(digest) => Ok((session, digest)),
            Err(e) => {
                self.flush(&mut session);
                Err(e)
            }
        }
    }

    /// The current sha256 values of `pcrs`, in order.
    pub fn read_pcrs(&mut self, pcrs: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        // A TPM answers at most eight digests per call.
        for chunk in pcrs.chunks(8) {
            let cmd = TpmPcrReadCommand { handles: [], pcr_selection_in: selection(chunk)? };
            let r: tpm2_protocol::frame::TpmPcrReadResponse = self.run("PCR_Read", &cmd, &[])?;
            out.extend(r.pcr_values.iter().map(|d| d.to_vec()));
        }
        Ok(out)
    }

    /// Extends sha256 PCR `pcr` with `digest` (32 bytes), as a boot component measuring
    /// itself would.
    pub fn extend_pcr(&mut self, pcr: u8, digest: &[u8; 32]) -> Result<()> {
        if pcr >= PCR_COUNT {
            return Err(Error::BadPcr(pcr));
        }
        let wire = |e: tpm2_protocol::TpmError| Error::Wire { command: "PCR_Extend", detail: format!("{e:?}") };
        let mut digests = TpmlDigestValues::new();
        digests
            .try_push(TpmtHa { hash_alg: TpmAlgId::Sha256, digest: TpmuHa::Digest(buffer(digest)?) })
            .map_err(wire)?;
        let cmd = TpmPcrExtendCommand { handles: [TpmHandle::new(u32::from(pcr))], digests };
        let _: tpm2_protocol::frame::TpmPcrExtendResponse = self.run("PCR_Extend", &cmd, &[password()])?;
        Ok(())
    }

    /// Seals `secret` (at most 128 bytes) to the current values of the sha256 `pcrs`.
    pub fn seal(&mut self, secret: &[u8], pcrs: &[u8]) -> Result<Sealed> {
        let pcrs = normalise(pcrs)?;
        let (mut trial, policy_hash) = self.pcr_policy(TpmSe::Trial, &pcrs)?;
        self.flush(&mut trial);
        let (mut srk, key_name) = self.storage_key()?;
        let outcome = (|| -> Result<_> {
            let cmd = TpmCreateCommand {
                handles: [TpmHandle::new(srk.0)],
                in_sensitive: Tpm2bSensitiveCreate {
                    inner: TpmsSensitiveCreate {
                        user_auth: Tpm2bAuth::default(),
                        data: buffer::<Tpm2bSensitiveData>(secret)?,
                    },
                },
                in_public: Tpm2bPublic { inner: sealed_template(&policy_hash)? },
                outside_info: Default::default(),
                creation_pcr: TpmlPcrSelection::default(),
            };
            let r: tpm2_protocol::frame::TpmCreateResponse = self.run("Create", &cmd, &[password()])?;
            Ok((marshal("Create", &r.out_public)?, marshal("Create", &r.out_private)?))
        })();
        self.flush(&mut srk);
        let (public, private) = outcome?;
        Ok(Sealed { public, private, pcrs, policy_hash, key_name })
    }

    /// Unseals what [`Device::seal`] sealed, if the PCRs hold the values they held then.
    pub fn unseal(&mut self, sealed: &Sealed) -> Result<Zeroizing<Vec<u8>>> {
        let pcrs = normalise(&sealed.pcrs)?;
        let (public, rest) =
            Tpm2bPublic::unmarshal(&sealed.public).map_err(|e| Error::BadBlob(format!("public: {e:?}")))?;
        if !rest.is_empty() {
            return Err(Error::BadBlob(format!("public: {} trailing bytes", rest.len())));
        }
        let (private, rest) =
            Tpm2bPrivate::unmarshal(&sealed.private).map_err(|e| Error::BadBlob(format!("private: {e:?}")))?;
        if !rest.is_empty() {
            return Err(Error::BadBlob(format!("private: {} trailing bytes", rest.len())));
        }
        let (mut srk, name) = self.storage_key()?;
        if !sealed.key_name.is_empty() && sealed.key_name != name {
            self.flush(&mut srk);
            return Err(Error::OtherStorageKey);
        }
        let load = TpmLoadCommand { handles: [TpmHandle::new(srk.0)], in_private: private, in_public: public };
        let loaded: Result<tpm2_protocol::frame::TpmLoadResponse> = self.run("Load", &load, &[password()]);
        self.flush(&mut srk);
        let mut item = Transient(loaded?.handles[0].value());
        let outcome = (|| -> Result<_> {
            let (mut session, digest) = self.pcr_policy(TpmSe::Policy, &pcrs)?;
            if !sealed.policy_hash.is_empty() && digest != sealed.policy_hash {
                self.flush(&mut session);
                return Err(Error::PcrsMoved(pcrs.clone()));
            }
            let auth = TpmsAuthCommand {
                session_handle: TpmHandle::new(session.0),
                nonce: Tpm2bNonce::default(),
                session_attributes: TpmaSession::empty(),
                hmac: Tpm2bAuth::default(),
            };
            let cmd = TpmUnsealCommand { handles: [TpmHandle::new(item.0)] };
            // Without continueSession the TPM closes the session once it has answered.
            let r: Result<tpm2_protocol::frame::TpmUnsealResponse> = self.run("Unseal", &cmd, &[auth]);
            match r {
                Ok(r) => Ok(Zeroizing::new(r.out_data.to_vec())),
                Err(Error::Rc { code, .. }) if code & 0xbf == RC_POLICY_FAIL => Err(Error::PcrsMoved(pcrs.clone())),
                Err(e) => Err(e),
            }
        })();
        self.flush(&mut item);
        outcome
    }
}

/// PCR numbers checked, sorted and without repeats.
fn normalise(pcrs: &[u8]) -> Result<Vec<u8>> {
    let mut v = pcrs.to_vec();
    if let Some(&bad) = v.iter().find(|&&p| p >= PCR_COUNT) {
        return Err(Error::BadPcr(bad));
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

fn selection(pcrs: &[u8]) -> Result<TpmlPcrSelection> {
    let mut bits = [0u8; 3];
    for &p in pcrs {
        if p >= PCR_COUNT {
            return Err(Error::BadPcr(p));
        }
        bits[usize::from(p / 8)] |= 1 << (p % 8);
    }
    let wire = |e: tpm2_protocol::TpmError| Error::Wire { command: "PCR selection", detail: format!("{e:?}") };
    let mut list = TpmlPcrSelection::new();
    list.try_push(TpmsPcrSelection {
        hash: TpmAlgId::Sha256,
        pcr_select: TpmsPcrSelect::try_from(&bits[..]).map_err(wire)?,
    })
    .map_err(wire)?;
    Ok(list)
}

fn password() -> TpmsAuthCommand {
    TpmsAuthCommand {
        session_handle: TpmHandle::new(TPM_RS_PW),
        nonce: Tpm2bNonce::default(),
        session_attributes: TpmaSession::empty(),
        hmac: Tpm2bAuth::default(),
    }
}

fn buffer<B: Default + BufferLike>(data: &[u8]) -> Result<B> {
    let mut b = B::default();
    b.extend(data).map_err(|e| Error::Wire { command: "buffer", detail: format!("{e:?}") })?;
    Ok(b)
}

/// The `tpm2-protocol` byte buffers of every capacity, filled the same way.
trait BufferLike {
    fn extend(&mut self, data: &[u8]) -> std::result::Result<(), tpm2_protocol::TpmError>;
}

impl<const N: usize> BufferLike for tpm2_protocol::basic::TpmBuffer<N> {
    fn extend(&mut self, data: &[u8]) -> std::result::Result<(), tpm2_protocol::TpmError> {
        self.try_extend_from_slice(data)
    }
}

fn marshal<T: TpmMarshal + TpmSized>(command: &'static str, value: &T) -> Result<Vec<u8>> {
    let mut out = vec![0u8; value.len()];
    let mut w = TpmWriter::new(&mut out);
    value.marshal(&mut w).map_err(|e| Error::Wire { command, detail: format!("{e:?}") })?;
    let n = w.len();
    out.truncate(n);
    Ok(out)
}

/// The TCG storage root key template, ECC NIST P-256 with AES-128-CFB for its children.
fn srk_template() -> Result<TpmtPublic> {
    let zeros = buffer::<Tpm2bEccParameter>(&[0u8; 32])?;
    Ok(TpmtPublic {
        object_type: TpmAlgId::Ecc,
        name_alg: TpmAlgId::Sha256,
        object_attributes: TpmaObject::FIXED_TPM
            | TpmaObject::FIXED_PARENT
            | TpmaObject::SENSITIVE_DATA_ORIGIN
            | TpmaObject::USER_WITH_AUTH
            | TpmaObject::NO_DA
            | TpmaObject::RESTRICTED
            | TpmaObject::DECRYPT,
        auth_policy: Tpm2bDigest::default(),
        parameters: TpmuPublicParms::Ecc(TpmsEccParms {
            symmetric: TpmtSymDef {
                algorithm: TpmAlgId::Aes,
                key_bits: TpmuSymKeyBits::Aes(TpmUint16::new(128)),
                mode: TpmuSymMode::Aes(TpmAlgId::Cfb),
            },
            scheme: TpmtEccScheme { scheme: TpmAlgId::Null, details: TpmuAsymScheme::Null },
            curve_id: TpmEccCurve::NistP256,
            kdf: TpmtKdfScheme { scheme: TpmAlgId::Null, details: TpmuKdfScheme::Null },
        }),
        unique: TpmuPublicId::Ecc(TpmsEccPoint { x: zeros, y: zeros }),
    })
}

/// A sealed data object whose only authorisation is `policy`.
fn sealed_template(policy: &[u8]) -> Result<TpmtPublic> {
    Ok(TpmtPublic {
        object_type: TpmAlgId::KeyedHash,
        name_alg: TpmAlgId::Sha256,
        object_attributes: TpmaObject::FIXED_TPM | TpmaObject::FIXED_PARENT,
        auth_policy: buffer::<Tpm2bDigest>(policy)?,
        parameters: TpmuPublicParms::KeyedHash(TpmsKeyedhashParms {
            scheme: TpmtKeyedhashScheme { scheme: TpmAlgId::Null, details: TpmuKeyedhashScheme::Null },
        }),
        unique: TpmuPublicId::KeyedHash(Tpm2bDigest::default()),
    })
}
