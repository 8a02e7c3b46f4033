//! The default corpus: the project's own `spec/` documents, embedded at
//! compile time so that nothing is read from disk at run time. Catalog
//! order is the order below (it breaks search ties).
//!
//! The bodies are copies kept inside this crate (`corpus/`, the same paths
//! as under `spec/`), so the crate packages and builds on its own;
//! `scripts/sync-embedded` refreshes them from `spec/`, and
//! `tests/it/embedded_copies.rs` fails while a copy differs from its original.
//! A document joins by copying it to `corpus/` and adding one entry here.

use super::DocRole;

/// One embedded document.
pub(super) struct Embedded {
    pub(super) id: &'static str,
    pub(super) title: &'static str,
    pub(super) role: DocRole,
    pub(super) description: &'static str,
    pub(super) body: &'static str,
}

/// Every default document, in catalog order.
pub(super) const DEFAULT_CORPUS: &[Embedded] = &[
    Embedded {
        id: "overview",
        title: "evidence-wire specification",
        role: DocRole::Reasoning,
        description: "Map of the specification: which document owns which concern, and the words provider, caller, frame and envelope.",
        body: include_str!("../corpus/README.md"),
    },
    Embedded {
        id: "protocol",
        title: "The evidence-provider protocol",
        role: DocRole::Reasoning,
        description: "What the evidence_query tool is for, one call end to end, and the Decision Gate and MCP dialects.",
        body: include_str!("../corpus/protocol.md"),
    },
    Embedded {
        id: "security",
        title: "Security",
        role: DocRole::Reasoning,
        description: "Trust principles and threat models: docs search, extra paths, resource reads, tool visibility and authorization.",
        body: include_str!("../corpus/security.md"),
    },
    Embedded {
        id: "calling-a-provider",
        title: "Calling a provider: which method, in which order",
        role: DocRole::Decision,
        description: "Which dialect to speak, which tool or method to call, in which order, and what to do when a call fails.",
        body: include_str!("../corpus/guides/calling-a-provider.md"),
    },
    Embedded {
        id: "docs-search",
        title: "Docs search and resources",
        role: DocRole::Decision,
        description: "The decision_gate_docs_search tool and resources/list and resources/read: corpus, limits, scoring, output.",
        body: include_str!("../corpus/docs-search.md"),
    },
    Embedded {
        id: "framing",
        title: "Framing",
        role: DocRole::Ontology,
        description: "Content-Length and newline-delimited stdio framing: detection, rules, limits and framing errors.",
        body: include_str!("../corpus/framing.md"),
    },
    Embedded {
        id: "envelope",
        title: "JSON-RPC envelopes",
        role: DocRole::Ontology,
        description: "The one envelope validation pipeline: the mcp, jsonrpc and strict policies, ids, params, batches, duplicate keys and nesting limits.",
        body: include_str!("../corpus/envelope.md"),
    },
    Embedded {
        id: "errors",
        title: "Canonical errors",
        role: DocRole::Ontology,
        description: "The closed table of canonical errors: HTTP status, JSON-RPC code, message, data.kind and when each applies.",
        body: include_str!("../corpus/errors.md"),
    },
    Embedded {
        id: "evidence",
        title: "Evidence",
        role: DocRole::Ontology,
        description: "EvidenceQuery, EvidenceContext and EvidenceResult fields; hash and signature verification; trust policies.",
        body: include_str!("../corpus/evidence.md"),
    },
    Embedded {
        id: "canonical-json",
        title: "Canonical JSON",
        role: DocRole::Ontology,
        description: "RFC 8785 canonical JSON: the exact bytes evidence hashes cover, and the Decision Gate compatibility profile.",
        body: include_str!("../corpus/canonical-json.md"),
    },
    Embedded {
        id: "provider-quickstart",
        title: "Provider quickstart",
        role: DocRole::Pattern,
        description: "Steps to write an evidence provider with the SDK (typed checks, derived contract), serve it with an adapter, configure and test it, and common mistakes.",
        body: include_str!("../corpus/guides/provider-quickstart.md"),
    },
    Embedded {
        id: "configuration",
        title: "Configuration",
        role: DocRole::Ontology,
        description: "The evidence-wire.toml file: every section and key, defaults, ranges, validation rules, and what its JSON Schema checks.",
        body: include_str!("../corpus/configuration.md"),
    },
    Embedded {
        id: "logging",
        title: "Validation logs",
        role: DocRole::Ontology,
        description: "Envelope validation logs: where the JSON Lines files go, every record field, .latest, transport parity and deterministic mode.",
        body: include_str!("../corpus/logging.md"),
    },
    Embedded {
        id: "bundled-provider",
        title: "The bundled provider",
        role: DocRole::Ontology,
        description: "The checks evidence-wire serve answers: params, result values, references, anchors and every error code.",
        body: include_str!("../corpus/bundled-provider.md"),
    },
    Embedded {
        id: "decision-gate",
        title: "Using evidence-wire with Decision Gate",
        role: DocRole::Pattern,
        description: "Steps to run evidence-wire serve as a Decision Gate mcp provider over stdio or HTTP: the capabilities contract, Decision Gate's configuration, optional signing, a worked scenario and troubleshooting.",
        body: include_str!("../corpus/guides/decision-gate.md"),
    },
    Embedded {
        id: "deployment",
        title: "Deploying replicas behind nginx",
        role: DocRole::Pattern,
        description: "Steps to run evidence-wire serve --http as N replicas behind nginx: configuration, retries of the idempotent evidence_query, health checks, graceful drain on SIGTERM, body limits, timeouts and Prometheus metrics.",
        body: include_str!("../corpus/guides/deployment.md"),
    },
    Embedded {
        id: "mounting-a-provider",
        title: "Mounting a provider in your application",
        role: DocRole::Pattern,
        description: "evidence_wire_tokio::ProviderService, a tower Service: mount a provider in an axum Router or a plain hyper server next to the application's own routes, with its policy, call cap, drain, metrics in the application's registry, HTTPS and tracing.",
        body: include_str!("../corpus/guides/mounting-a-provider.md"),
    },
    Embedded {
        id: "checking-a-provider",
        title: "Checking a provider",
        role: DocRole::Pattern,
        description: "evidence-wire check-provider: the conformance and robustness report for any evidence provider, in a provider's CI, and what every line of it means.",
        body: include_str!("../corpus/guides/checking-a-provider.md"),
    },
    Embedded {
        id: "wrapping-a-provider",
        title: "Signing a provider written in Python, TypeScript or Go",
        role: DocRole::Pattern,
        description: "evidence-wire wrap: a sidecar in front of an existing provider in any language that checks queries against its contract, verifies, hashes and signs its answers for Decision Gate's require_signature, and restarts it; configuration, limits and troubleshooting.",
        body: include_str!("../corpus/guides/wrapping-a-provider.md"),
    },
];
