//! A KMS server speaking Talos's `sidero.kms.KMSService`, with the seal format of
//! siderolabs/kms-client's server: AES-GCM under one key, the 12-byte nonce first, then the
//! ciphertext and its 16-byte tag. `Seal` takes exactly a 32-byte passphrase; `Unseal` of
//! data sealed under another key answers random bytes, not an error, as that server does
//! (so a probe learns nothing but that the slot does not open).
//!
//! It is what `talosctl kms-launch` runs, for test clusters: on a TCP address, or on one
//! connection over stdin and stdout (as QEMU's `guestfwd=...-cmd:` hands a node's connection
//! to a program), so no listener is left on the host.

use std::pin::Pin;
use std::task::{Context, Poll};

use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::{Request, Response, Status};
use zeroize::Zeroizing;

use crate::block::encryption::KMS_PASSPHRASE_LEN;
use crate::proto::sidero::kms::kms_service_server::{KmsService, KmsServiceServer};
use crate::proto::sidero::kms::{Request as KmsRequest, Response as KmsResponse};

/// The tag AES-GCM appends.
const TAG_LEN: usize = 16;

/// The server's state: its one key.
pub struct KmsServer {
    key: LessSafeKey,
}

impl KmsServer {
    /// A server sealing with `key` (16 or 32 bytes: AES-128 or AES-256).
    pub fn new(key: &[u8]) -> Result<KmsServer, String> {
        let alg = match key.len() {
            16 => &AES_128_GCM,
            32 => &AES_256_GCM,
            n => return Err(format!("the KMS key is {n} bytes; it must be 16 or 32")),
        };
        let key = UnboundKey::new(alg, key).map_err(|_| "the KMS key is not an AES key".to_string())?;
        Ok(KmsServer { key: LessSafeKey::new(key) })
    }

    /// `data` sealed: nonce, ciphertext, tag.
    pub fn seal(&self, data: &[u8]) -> Result<Vec<u8>, Status> {
        if data.len() != KMS_PASSPHRASE_LEN {
            return Err(Status::invalid_argument("incorrect data length"));
        }
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| Status::internal(format!("random nonce: {e}")))?;
        let mut out = nonce.to_vec();
        let mut body = data.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut body)
            .map_err(|_| Status::internal("sealing failed"))?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// What `seal` sealed, or random bytes when it was sealed under another key.
    pub fn unseal(&self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>, Status> {
        if data.len() != NONCE_LEN + KMS_PASSPHRASE_LEN + TAG_LEN {
            return Err(Status::invalid_argument("incorrect data length"));
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&data[..NONCE_LEN]);
        let mut body = Zeroizing::new(data[NONCE_LEN..].to_vec());
        match self.key.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut body) {
            Ok(plain) => Ok(Zeroizing::new(plain.to_vec())),
            Err(_) => {
                let mut noise = Zeroizing::new(vec![0u8; KMS_PASSPHRASE_LEN]);
                getrandom::fill(&mut noise).map_err(|e| Status::internal(format!("random: {e}")))?;
                Ok(noise)
            }
        }
    }
}

#[tonic::async_trait]
impl KmsService for KmsServer {
    async fn seal(&self, request: Request<KmsRequest>) -> Result<Response<KmsResponse>, Status> {
        let req = request.into_inner();
        tracing::info!(node = %req.node_uuid, "KMS seal");
        Ok(Response::new(KmsResponse { data: KmsServer::seal(self, &req.data)? }))
    }

    async fn unseal(&self, request: Request<KmsRequest>) -> Result<Response<KmsResponse>, Status> {
        let req = request.into_inner();
        tracing::info!(node = %req.node_uuid, "KMS unseal");
        Ok(Response::new(KmsResponse { data: KmsServer::unseal(self, &req.data)?.to_vec() }))
    }
}

/// Serves `server` on `addr` until the process is stopped.
pub async fn serve_tcp(server: KmsServer, addr: std::net::SocketAddr) -> Result<(), String> {
    tonic::transport::Server::builder()
        .add_service(KmsServiceServer::new(server))
        .serve(addr)
        .await
        .map_err(|e| format!("serving on {addr}: {e}"))
}

/// Serves `server` on the one connection that is this process's stdin and stdout, and returns
/// when the peer is done with it.
pub async fn serve_stdio(server: KmsServer) -> Result<(), String> {
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    let conn = Stdio { io: tokio::io::join(tokio::io::stdin(), tokio::io::stdout()), closed: Some(closed_tx) };
    let incoming = tokio_stream::once(Ok::<_, std::io::Error>(conn)).chain(tokio_stream::pending());
    tonic::transport::Server::builder()
        .add_service(KmsServiceServer::new(server))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = closed_rx.await;
        })
        .await
        .map_err(|e| format!("serving on stdin and stdout: {e}"))
}

use tokio_stream::StreamExt as _;

/// stdin and stdout as one connection, which says when the peer closed its side.
struct Stdio {
    io: tokio::io::Join<tokio::io::Stdin, tokio::io::Stdout>,
    closed: Option<tokio::sync::oneshot::Sender<()>>,
}

impl tonic::transport::server::Connected for Stdio {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Stdio {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && let Some(tx) = self.closed.take()
        {
            let _ = tx.send(());
        }
        r
    }
}

impl AsyncWrite for Stdio {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_data_opens_under_its_key_only() {
        let a = KmsServer::new(&[1u8; 32]).unwrap();
        let b = KmsServer::new(&[2u8; 32]).unwrap();
        let secret = [7u8; KMS_PASSPHRASE_LEN];
        let sealed = a.seal(&secret).unwrap();
        assert_eq!(sealed.len(), NONCE_LEN + KMS_PASSPHRASE_LEN + TAG_LEN);
        assert_ne!(sealed, a.seal(&secret).unwrap(), "a fresh nonce each time");
        assert_eq!(&*a.unseal(&sealed).unwrap(), &secret);
        let other = b.unseal(&sealed).unwrap();
        assert_eq!(other.len(), KMS_PASSPHRASE_LEN);
        assert_ne!(&*other, &secret, "another key answers noise");
        assert_eq!(a.seal(&[0u8; 31]).unwrap_err().code(), tonic::Code::InvalidArgument);
        assert_eq!(a.unseal(&sealed[1..]).unwrap_err().code(), tonic::Code::InvalidArgument);
        assert!(KmsServer::new(&[0u8; 20]).err().unwrap().contains("20 bytes"));
        assert!(KmsServer::new(&[0u8; 16]).is_ok());
    }
}
