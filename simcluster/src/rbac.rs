//! Authorization: RBAC evaluated from the Role/ClusterRole/RoleBinding/ClusterRoleBinding
//! objects in the store, Forbidden messages as the real server writes them, and the access
//! review APIs (SelfSubjectAccessReview, SubjectAccessReview, SelfSubjectReview).
