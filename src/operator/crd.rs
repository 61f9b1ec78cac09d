//! The TalosMachine CustomResourceDefinition, as `talosbox operator crd` prints it for
//! `kubectl apply -f -`: the status subresource (so status writes are separate and
//! conditional), printer columns State/Version/Endpoint/Age, and the short name `tm`.
//! Written by hand from the model's fields; a test keeps the two in step.

/// The CRD's YAML.
pub const CRD_YAML: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: talosmachines.talosbox.dev
spec:
  group: talosbox.dev
  scope: Namespaced
  names:
    kind: TalosMachine
    listKind: TalosMachineList
    plural: talosmachines
    singular: talosmachine
    shortNames:
      - tm
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources:
        status: {}
      additionalPrinterColumns:
        - name: State
          type: string
          jsonPath: .status.state
        - name: Version
          type: string
          jsonPath: .spec.version
        - name: Endpoint
          type: string
          jsonPath: .spec.endpoint
        - name: Age
          type: date
          jsonPath: .metadata.creationTimestamp
      schema:
        openAPIV3Schema:
          type: object
          required: [spec]
          properties:
            spec:
              type: object
              required: [endpoint, version, credentials, config]
              properties:
                endpoint:
                  type: string
                  minLength: 1
                  description: The node's API address (host, host:port).
                version:
                  type: string
                  minLength: 1
                  description: The version the node must report (v1.9.0).
                image:
                  type: string
                  description: What the Upgrade RPC installs when the node's version diverged.
                credentials:
                  type: object
                  description: Exactly one of secretsRef (a Secret with the fleet's secrets bundle) and talosconfigRef (a Secret with a talosconfig).
                  properties:
                    secretsRef:
                      type: object
                      required: [name]
                      properties:
                        name: {type: string}
                        key: {type: string}
                    talosconfigRef:
                      type: object
                      required: [name]
                      properties:
                        name: {type: string}
                        key: {type: string}
                config:
                  type: object
                  description: Exactly one of inline and configRef (a ConfigMap key), with patches applied in order.
                  properties:
                    inline: {type: string}
                    configRef:
                      type: object
                      required: [name]
                      properties:
                        name: {type: string}
                        key: {type: string}
                    patches:
                      type: array
                      items: {type: string}
                deletionPolicy:
                  type: string
                  enum: [preserve, reset]
                  default: preserve
            status:
              type: object
              properties:
                state:
                  type: string
                  enum: [Pending, Installing, Available, Drifted, Upgrading, Orphaned]
                observedVersion: {type: string}
                configHash: {type: string}
                observedGeneration: {type: integer, format: int64}
                imported: {type: boolean}
                conditions:
                  type: array
                  items:
                    type: object
                    required: [type, status]
                    properties:
                      type: {type: string}
                      status: {type: string}
                      reason: {type: string}
                      message: {type: string}
                      lastTransitionTime: {type: string}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_names_every_field_of_the_model() {
        let crd: serde_json::Value = serde_saphyr::from_str(CRD_YAML).unwrap();
        let v = &crd["spec"]["versions"][0];
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "tm");
        assert!(v["subresources"]["status"].is_object());
        let columns: Vec<&str> =
            v["additionalPrinterColumns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(columns, ["State", "Version", "Endpoint", "Age"]);
        // Every field a machine serializes is in the schema.
        let mut m = crate::operator::testing::machine("a");
        m.spec.credentials.talosconfig_ref =
            Some(crate::operator::model::KeyRef { name: "x".into(), key: Some("k".into()) });
        m.spec.config.config_ref = Some(crate::operator::model::KeyRef { name: "c".into(), key: None });
        m.spec.config.patches = vec!["x".into()];
        m.status.state = Some(crate::operator::MachineState::Available);
        m.status.observed_version = "v".into();
        m.status.config_hash = "h".into();
        m.status.imported = true;
        m.status.set_condition("Ready", true, "r", "m", "t");
        let json = serde_json::to_value(&m).unwrap();
        let schema = &v["schema"]["openAPIV3Schema"]["properties"];
        for part in ["spec", "status"] {
            for (field, value) in json[part].as_object().unwrap() {
                let s = &schema[part]["properties"][field];
                assert!(s.is_object(), "{part}.{field} is not in the CRD");
                if let Some(inner) = value.as_object() {
                    for sub in inner.keys() {
                        assert!(s["properties"][sub].is_object(), "{part}.{field}.{sub} is not in the CRD");
                    }
                }
            }
        }
    }
}
