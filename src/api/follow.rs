//! Following one resource through a `cosi.resource.State` endpoint: what apid and trustd do
//! with the state socket machined serves them. The latest value lands in a watch channel; a
//! broken stream is re-established after a pause, so a restarted machined socket or a rotated
//! certificate is picked up without restarting the service.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::cosi::ResourceSpec;
use crate::proto::cosi::resource::{EventType, WatchRequest, state_client::StateClient};

/// How long to wait before watching again after the stream broke.
const RETRY: Duration = Duration::from_secs(1);

/// Follows `namespace`/`T`/`id` on `channel` until `cancel`, publishing every value (`None`
/// while it does not exist). Errors are reported to `log` and retried.
pub async fn follow<T: ResourceSpec>(
    channel: Channel,
    namespace: &str,
    id: &str,
    tx: watch::Sender<Option<T>>,
    cancel: CancellationToken,
    log: impl Fn(&str),
) {
    let mut client = StateClient::new(channel);
    loop {
        let request = WatchRequest {
            namespace: namespace.to_string(),
            r#type: T::DEFINITION.type_name.to_string(),
            id: Some(id.to_string()),
            options: None,
            api_version: 1,
        };
        let outcome = tokio::select! {
            () = cancel.cancelled() => return,
            r = client.watch(request) => r,
        };
        match outcome {
            Err(status) => log(&format!("watching {}/{id}: {}", T::DEFINITION.type_name, status.message())),
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    let message = tokio::select! {
                        () = cancel.cancelled() => return,
                        m = stream.message() => m,
                    };
                    match message {
                        Ok(Some(batch)) => {
                            for event in batch.event {
                                match EventType::try_from(event.event_type) {
                                    Ok(EventType::Created | EventType::Updated) => {
                                        let yaml = event.resource.and_then(|r| r.spec).map(|s| s.yaml_spec);
                                        match yaml.as_deref().map(serde_saphyr::from_str::<T>) {
                                            Some(Ok(spec)) => {
                                                tx.send_replace(Some(spec));
                                            }
                                            Some(Err(e)) => log(&format!("decoding {}: {e}", T::DEFINITION.type_name)),
                                            None => log(&format!("{} arrived without a spec", T::DEFINITION.type_name)),
                                        }
                                    }
                                    Ok(EventType::Destroyed) => {
                                        tx.send_replace(None);
                                    }
                                    Ok(EventType::Errored) => {
                                        log(&format!(
                                            "watch of {}: {}",
                                            T::DEFINITION.type_name,
                                            event.error.unwrap_or_default()
                                        ));
                                    }
                                    _ => {}
                                }
                            }
                        }
                        Ok(None) => break,
                        Err(status) => {
                            log(&format!("watch of {} broke: {}", T::DEFINITION.type_name, status.message()));
                            break;
                        }
                    }
                }
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}
