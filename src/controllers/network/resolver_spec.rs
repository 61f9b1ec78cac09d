//! `ResolverSpecController`: the merged `ResolverSpec` in force, copied into its
//! `ResolverStatus`, as Talos does: nothing in the kernel holds resolvers, so applying them
//! is publishing them for the readers (`/etc/resolv.conf`, the host DNS forwarder). Each spec
//! is held until its status is gone. It never decides which resolvers win: the merge did.

use crate::controllers::generic_transform::TransformController;
use crate::resources::network::{NAMESPACE, ResolverSpec, ResolverStatus};

pub type ResolverSpecController = TransformController<ResolverSpec, ResolverStatus>;

/// The status a merged spec publishes.
pub(crate) fn resolver_status(spec: &ResolverSpec) -> ResolverStatus {
    ResolverStatus { dns_servers: spec.dns_servers.clone(), search_domains: spec.search_domains.clone() }
}

/// The controller, `network` to `network`.
pub fn resolver_spec_controller() -> ResolverSpecController {
    TransformController::new("ResolverSpecController", NAMESPACE, NAMESPACE, |_, spec| {
        Ok(Some(resolver_status(spec.spec())))
    })
    .with_input_finalizers()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::{Controller, Harness};
    use crate::resources::network::ConfigLayer;

    #[tokio::test]
    async fn the_merged_spec_is_published_and_withdrawn() {
        let h = Harness::start(vec![Box::new(resolver_spec_controller()) as Box<dyn Controller>]).unwrap();
        let spec = ResolverSpec {
            dns_servers: vec!["10.0.0.1".parse().unwrap(), "2001:db8::53".parse().unwrap()],
            search_domains: vec!["example.test".into()],
            config_layer: ConfigLayer::Operator,
            search_domains_overridden: false,
        };
        h.seed(NAMESPACE, ResolverSpec::ID, spec.clone()).unwrap();
        let want =
            ResolverStatus { dns_servers: spec.dns_servers.clone(), search_domains: vec!["example.test".into()] };
        h.assert_spec(NAMESPACE, ResolverStatus::ID, &want).await;
        h.unseed::<ResolverSpec>(NAMESPACE, ResolverSpec::ID).unwrap();
        h.assert_absent::<ResolverStatus>(NAMESPACE, ResolverStatus::ID).await;
        h.assert_eventually::<ResolverSpec, _>(NAMESPACE, ResolverSpec::ID, "released", |r| {
            r.is_some_and(|r| r.metadata().finalizers.is_empty())
        })
        .await;
        h.stop().await;
    }
}
