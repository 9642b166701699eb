//! CustomResourceDefinitions: CRD validation, the resources a CRD serves, and for custom
//! resources: structural defaulting, pruning (unknown-field warnings / strict errors), schema
//! validation, CEL `x-kubernetes-validations` (kube-cel), printer columns as Table.
