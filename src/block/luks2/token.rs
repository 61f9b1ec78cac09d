//! LUKS2 tokens, and the two Talos keeps its sealed keys in.
//!
//! A token is a JSON object with a `type` and the `keyslots` it belongs to; the rest is its
//! owner's. Talos (go-blockdevice's `luks.Token`) writes one token per key slot, with the
//! token id equal to the slot id, `keyslots` empty, and its data under `UserData`:
//! `sideroKMS` holds `{"sealedData": base64}` (the KMS-sealed passphrase) and `talos-tpm2`
//! the TPM-sealed blob with its PCR policy ([`TpmToken`]). Byte fields are base64 as Go's
//! `encoding/json` writes `[]byte`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::header::{b64, ids};
use super::{Luks2Error, Result};

/// Talos's KMS token type (`keys.TokenTypeKMS`).
pub const TOKEN_TYPE_KMS: &str = "sideroKMS";
/// Talos's TPM token type (`keys.TokenTypeTPM`).
pub const TOKEN_TYPE_TPM: &str = "talos-tpm2";
/// Where Talos puts a token's data (go-blockdevice keeps this name for compatibility).
const USER_DATA: &str = "UserData";

/// One token of the metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Token {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(with = "ids")]
    pub keyslots: Vec<u32>,
    /// Everything else in the token's object.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Token {
    /// A token in Talos's shape: `{"UserData": user_data, "type": kind, "keyslots": []}`.
    pub fn talos<T: Serialize>(kind: &str, user_data: &T) -> Result<Token> {
        let data = serde_json::to_value(user_data).map_err(Luks2Error::Json)?;
        Ok(Token { kind: kind.into(), keyslots: Vec::new(), fields: Map::from_iter([(USER_DATA.to_string(), data)]) })
    }

    /// The `UserData` of a token in Talos's shape.
    pub fn talos_user_data<T: DeserializeOwned>(&self) -> Result<T> {
        let data = self.fields.get(USER_DATA).cloned().ok_or_else(|| Luks2Error::Invalid {
            field: format!("token of type {}", self.kind),
            reason: format!("no {USER_DATA}"),
        })?;
        serde_json::from_value(data).map_err(Luks2Error::Json)
    }
}

/// `sideroKMS`'s data: the passphrase as the KMS sealed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmsToken {
    #[serde(rename = "sealedData", with = "b64")]
    pub sealed_data: Vec<u8>,
}

/// `talos-tpm2`'s data: the TPM-sealed passphrase and the policy it was sealed to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpmToken {
    #[serde(rename = "keyslots", default, deserialize_with = "null_as_empty")]
    pub key_slots: Vec<i64>,
    #[serde(with = "b64")]
    pub sealed_blob_private: Vec<u8>,
    #[serde(with = "b64")]
    pub sealed_blob_public: Vec<u8>,
    #[serde(default, deserialize_with = "null_as_empty", skip_serializing_if = "Vec::is_empty")]
    pub pcrs: Vec<i64>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub pubkey_pcrs: Vec<i64>,
    pub alg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub encryption_version: String,
    #[serde(with = "b64")]
    pub policy_hash: Vec<u8>,
    #[serde(with = "b64")]
    pub key_name: Vec<u8>,
}

/// Go writes a nil slice as `null`.
fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<i64>, D::Error> {
    Ok(Option::<Vec<i64>>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kms_token_has_talos_shape() {
        let token = Token::talos(TOKEN_TYPE_KMS, &KmsToken { sealed_data: b"sealed".to_vec() }).unwrap();
        // go-blockdevice's Token.Bytes() for the same data, key order aside.
        let want: Value =
            serde_json::from_str(r#"{"UserData":{"sealedData":"c2VhbGVk"},"type":"sideroKMS","keyslots":[]}"#).unwrap();
        assert_eq!(serde_json::to_value(&token).unwrap(), want);
        let back: Token = serde_json::from_value(want).unwrap();
        assert_eq!(back.talos_user_data::<KmsToken>().unwrap().sealed_data, b"sealed");
    }

    #[test]
    fn tpm_token_reads_what_go_writes() {
        // The fields of Talos's keys.TPMToken, with Go's nil slices as null.
        let json = r#"{"type":"talos-tpm2","keyslots":[],"UserData":{"keyslots":[0],
            "sealed_blob_private":"AQID","sealed_blob_public":"BAU=","pcrs":null,"pubkey_pcrs":[11],
            "alg":"sha256","policy_hash":"Bg==","key_name":null}}"#;
        let token: Token = serde_json::from_str(json).unwrap();
        assert_eq!(token.kind, TOKEN_TYPE_TPM);
        let tpm: TpmToken = token.talos_user_data().unwrap();
        assert_eq!(tpm.key_slots, [0]);
        assert_eq!(tpm.sealed_blob_private, [1, 2, 3]);
        assert_eq!(tpm.sealed_blob_public, [4, 5]);
        assert!(tpm.pcrs.is_empty() && tpm.key_name.is_empty());
        assert_eq!(tpm.pubkey_pcrs, [11]);
        let again = serde_json::to_value(&tpm).unwrap();
        assert!(again.get("pcrs").is_none() && again.get("encryption_version").is_none());
        assert_eq!(again["policy_hash"], "Bg==");
        assert!(
            Token { kind: "x".into(), keyslots: vec![], fields: Map::new() }.talos_user_data::<KmsToken>().is_err()
        );
    }
}
