//! Navigating the structure of an object's type: the built-in v1.36 types
//! (`data/builtin-schemas.json`) and CRD `openAPIV3Schema`s alike, for the field manager
//! (list-map keys, atomic lists and maps) and strategic merge patch (merge keys, strategies).
//! OWNED BY the field-manager work; see `fieldmanager/`.
