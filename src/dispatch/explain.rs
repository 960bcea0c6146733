//! `SLOTBRIDGE EXPLAIN <command> [args...]`: how the proxy would carry out a command,
//! without running it. Pure: it reads the command table, the layout, the policy, the
//! user's ACL and the current slot map, and asks [`Proxy::plan`] (the planner every
//! request goes through) for the shape, so the explanation cannot drift from routing.
//!
//! The reply is a list of `field: value` lines in a fixed field order (see README,
//! "SLOTBRIDGE EXPLAIN"): `command`, `shape`, `route`, then one `key` per key, one `part`
//! per sub-request of a split, one `upkeep` per index entry a write keeps, then `layout`,
//! `policy`, `acl`, and `reply` when the planner would answer an error itself.

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::auth::User;
use crate::command::{CommandSpec, KeyList, Shape, SplitKind};
use crate::protocol::encode::{self, encode_request};
use crate::protocol::{Proto, Request};
use crate::rewrite::Forward;
use crate::route::key_slot;

use super::{layout, Plan, Proxy, Target};

/// Every field, in the order the lines come (see the module doc).
pub const FIELDS: &[&str] = &[
    "command", "shape", "route", "key", "part", "upkeep", "layout", "policy", "acl", "reply",
];

/// Where the client session takes a command before it reaches routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionShape {
    /// Answered from the connection's own state (PING, ECHO, CLIENT SETNAME, HELLO...).
    Connection,
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH: the proxy's transaction handling.
    Transaction,
}

/// The lines of one explanation, in field order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Explanation {
    lines: Vec<(&'static str, String)>,
}

impl Explanation {
    fn push(&mut self, field: &'static str, value: impl Into<String>) {
        self.lines.push((field, value.into()));
    }

    /// The `(field, value)` lines, in order; a field may repeat (`key`, `part`, `upkeep`).
    pub fn lines(&self) -> &[(&'static str, String)] {
        &self.lines
    }

    /// The values of `field`, in order.
    pub fn values(&self, field: &str) -> Vec<&str> {
        let lines = self.lines.iter().filter(|(name, _)| *name == field);
        lines.map(|(_, value)| value.as_str()).collect()
    }

    /// The reply frame: RESP2 a flat array of `field: value` bulk strings; RESP3 a map of
    /// each field (first-appearance order) to the array of its values.
    pub fn frame(&self, proto: Proto) -> Bytes {
        let mut out = BytesMut::new();
        match proto {
            Proto::Resp2 => {
                encode::array_header(&mut out, self.lines.len());
                for (field, value) in &self.lines {
                    encode::bulk(&mut out, format!("{field}: {value}").as_bytes());
                }
            }
            Proto::Resp3 => {
                let mut fields: Vec<&'static str> = Vec::new();
                for (field, _) in &self.lines {
                    if !fields.contains(field) {
                        fields.push(field);
                    }
                }
                encode::map_header(&mut out, proto, fields.len());
                for field in fields {
                    encode::bulk(&mut out, field.as_bytes());
                    let values = self.values(field);
                    encode::array_header(&mut out, values.len());
                    for value in values {
                        encode::bulk(&mut out, value.as_bytes());
                    }
                }
            }
        }
        out.freeze()
    }
}

/// An error frame's text (`-ERR x\r\n` -> `ERR x`); other frames as they print.
fn error_text(frame: &[u8]) -> String {
    let text = frame.strip_prefix(b"-").unwrap_or(frame);
    let text = text.strip_suffix(b"\r\n").unwrap_or(text);
    String::from_utf8_lossy(text).into_owned()
}

fn shown(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

impl Proxy {
    /// Explains `args` (a command and its arguments) as sent by a client running as
    /// `user` (`None`: no restrictions); `session` is set when the client session handles
    /// the command before routing. Runs nothing.
    pub fn explain(
        &self,
        args: &[Bytes],
        session: Option<SessionShape>,
        user: Option<&User>,
    ) -> Explanation {
        let mut out = Explanation::default();
        let spec = self.commands.lookup(args);
        out.push(
            "command",
            spec.map_or_else(
                || format!("unknown ({})", shown(&args[0])),
                |s| s.name.clone(),
            ),
        );
        let request = request_of(args);
        let (routed, strict_refusal) = match spec {
            Some(spec) if spec.arity_ok(args.len()) => self.explain_keys(spec, &request, &mut out),
            _ => {
                let layout = self.layout.as_ref().map(|a| a.layout.source_name());
                out.push("layout", layout.unwrap_or("none"));
                (request.clone(), None)
            }
        };
        let mut shape = Vec::new();
        match (session, strict_refusal) {
            (Some(session), _) => explain_session(session, &mut shape),
            (None, Some(refusal)) => {
                shape.push(("shape", "refused".to_string()));
                shape.push(("reply", error_text(&refusal)));
            }
            (None, None) => self.explain_plan(spec, &routed, &mut shape),
        }
        // A write that keeps an index is not sent as is (see the `layout` line for how).
        if !out.values("upkeep").is_empty() {
            for (field, value) in &mut shape {
                if *field == "route" {
                    if let Some(rest) = value.strip_prefix("as is to ") {
                        *value = format!("with its index upkeep to {rest}");
                    }
                }
            }
        }
        out.lines.extend(shape);
        self.explain_admission(spec, &request, user, &mut out);
        // Stable: lines of one field keep their order.
        out.lines
            .sort_by_key(|(field, _)| FIELDS.iter().position(|f| f == field));
        out
    }

    /// The `key` lines (and `upkeep`, `layout`) of a known command with a valid arity, and
    /// the request as routing sees it (the cluster names under the layout). The second
    /// value is the strict layout's refusal of a key no rule matches.
    fn explain_keys(
        &self,
        spec: &CommandSpec,
        request: &Request,
        out: &mut Explanation,
    ) -> (Request, Option<Bytes>) {
        let args = &request.args;
        let mut keys: KeyList = SmallVec::new();
        spec.keys(args, &mut keys);
        let Some(active) = self.layout.as_ref() else {
            for key in &keys {
                let name = &args[key.index];
                out.push("key", format!("{} {}", shown(name), self.slot_owner(name)));
            }
            out.push("layout", "none");
            return (request.clone(), None);
        };
        let mut renamed: Vec<Bytes> = args.to_vec();
        let mut upkeep = Vec::new();
        let mut refusal = None;
        for key in &keys {
            let name = &args[key.index];
            let (cluster, text) = match active.layout.forward(name) {
                Forward::Outside => (name.clone(), "outside every prefix".to_string()),
                Forward::Unmatched { prefix } => {
                    let prefix = &active.layout.prefixes()[prefix];
                    if active.strict && refusal.is_none() {
                        refusal = Some(crate::reply::error(
                            &crate::reply::refusals::layout_unmatched(name.escape_ascii(), prefix),
                        ));
                    }
                    (name.clone(), format!("unmatched under prefix {prefix}"))
                }
                Forward::Rewritten(rewritten) => {
                    let rule = active
                        .layout
                        .rule_of(name)
                        .map_or_else(String::new, |rule| {
                            format!("rule {} {} ", rule.number, rule.legacy)
                        });
                    let family = active.layout.family_name(rewritten.family);
                    if let Some(entry) = rewritten.index.filter(|_| layout::upkeeps(spec, key)) {
                        upkeep.push(format!(
                            "{} member {} (slot {})",
                            shown(&entry.key),
                            shown(&entry.member),
                            key_slot(&entry.key)
                        ));
                    }
                    let text = format!("-> {} ({rule}family {family})", shown(&rewritten.key));
                    (rewritten.key, text)
                }
            };
            out.push(
                "key",
                format!("{} {text} {}", shown(name), self.slot_owner(&cluster)),
            );
            renamed[key.index] = cluster;
        }
        self.explain_upkeep(spec, args, &upkeep, out);
        (request_of(&renamed), refusal)
    }

    fn explain_upkeep(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
        upkeep: &[String],
        out: &mut Explanation,
    ) {
        let how = if upkeep.is_empty() {
            "none"
        } else if layout::upkeep_in_script(spec, args) {
            "in the index upkeep script, atomically with the command"
        } else {
            "a refresh of the index entries with the command (MULTI/EXEC where possible)"
        };
        for entry in upkeep {
            out.push("upkeep", entry.clone());
        }
        if let Some(active) = &self.layout {
            let source = active.layout.source_name();
            out.push("layout", format!("{source} (index upkeep: {how})"));
        }
    }

    /// `slot S master ADDR` for a key's cluster name.
    fn slot_owner(&self, key: &[u8]) -> String {
        let slot = key_slot(key);
        format!("slot {slot} master {}", self.master_of(slot))
    }

    fn master_of(&self, slot: u16) -> String {
        let routing = self.topology.routing();
        routing
            .map
            .master_addr(slot)
            .map_or_else(|| "none (slot not covered)".into(), |addr| addr.to_string())
    }

    fn target_text(&self, target: Target) -> String {
        match target {
            Target::Slot(slot) => format!("the master of slot {slot} ({})", self.master_of(slot)),
            Target::AnyMaster => "any master".into(),
        }
    }

    /// The `shape`, `route` and `part` lines from the planner's decision.
    fn explain_plan(
        &self,
        spec: Option<&CommandSpec>,
        request: &Request,
        out: &mut Vec<(&'static str, String)>,
    ) {
        if spec.is_some_and(|spec| spec.shape == Shape::Subscribe) {
            out.push(("shape", "pubsub".into()));
            out.push(("route", "the client's own subscription connections".into()));
            return;
        }
        let every_master = || format!("every master: {}", self.master_addrs().join(", "));
        let (shape, route) = match self.plan_without_layout(spec, request) {
            Plan::Answer(reply) => {
                out.push(("shape", "refused".into()));
                out.push(("reply", error_text(&reply)));
                return;
            }
            Plan::Forward(target) => ("forward", format!("as is to {}", self.target_text(target))),
            Plan::Split(kind) => {
                out.push(("shape", "split".into()));
                out.push(("route", "one sub-request per slot, replies merged".into()));
                self.explain_parts(kind, &request.args, out);
                return;
            }
            Plan::Blocking(target) => (
                "blocking",
                format!("a dedicated connection to {}", self.target_text(target)),
            ),
            Plan::Emulate(local) => ("emulated", format!("answered by the proxy ({local:?})")),
            Plan::Fanout(op) => ("fanout", format!("{} ({op:?})", every_master())),
            Plan::ScriptAdmin(admin) => {
                ("fanout", format!("{} (script {admin:?})", every_master()))
            }
            Plan::Script(run, target) => (
                "script",
                format!(
                    "{run:?} on a connection of its own to {}",
                    self.target_text(target)
                ),
            ),
            Plan::Sort(_) => (
                "sort",
                "in steps: the sort, pattern reads and STORE by slot".into(),
            ),
            Plan::CrossSlot(run) => ("crossslot", run.route().into()),
            // The plan without the layout's part has neither (see the `layout` line).
            Plan::Upkeep(_) => ("forward", "with its index upkeep".into()),
            Plan::Listing(..) => ("fanout", every_master()),
        };
        // Under a layout, KEYS and SCAN list through the layout (see `layout::Listing`).
        let listing = self.layout.is_some()
            && spec.is_some_and(|spec| matches!(spec.name.as_str(), "keys" | "scan"));
        let route = if listing {
            format!("{route}; under the layout: index reads and SCAN by pattern, legacy names back")
        } else {
            route
        };
        out.push(("shape", shape.into()));
        out.push(("route", route));
    }

    /// One `part` line per slot of a split: its master and the arguments it carries.
    fn explain_parts(
        &self,
        kind: SplitKind,
        args: &[Bytes],
        out: &mut Vec<(&'static str, String)>,
    ) {
        let stride = kind.stride();
        let mut parts: Vec<(u16, Vec<&Bytes>)> = Vec::new();
        for group in args[1..].chunks(stride) {
            let slot = key_slot(&group[0]);
            match parts.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, part)) => part.extend(group),
                None => parts.push((slot, group.iter().collect())),
            }
        }
        for (slot, part) in parts {
            let words: Vec<String> = std::iter::once(&args[0])
                .chain(part)
                .map(|arg| shown(arg))
                .collect();
            out.push((
                "part",
                format!(
                    "slot {slot} master {}: {}",
                    self.master_of(slot),
                    words.join(" ")
                ),
            ));
        }
    }

    /// The `policy` and `acl` lines: the refusal each would give, or `allowed`.
    fn explain_admission(
        &self,
        spec: Option<&CommandSpec>,
        request: &Request,
        user: Option<&User>,
        out: &mut Explanation,
    ) {
        let Some(spec) = spec else {
            out.push("policy", "allowed");
            out.push("acl", "allowed");
            return;
        };
        let policy = self.policy_refusal(spec, &request.args);
        out.push(
            "policy",
            policy.map_or("allowed".into(), |r| error_text(&r)),
        );
        let acl = Self::user_refusal(spec, request, user);
        out.push("acl", acl.map_or("allowed".into(), |r| error_text(&r)));
    }
}

fn explain_session(session: SessionShape, out: &mut Vec<(&'static str, String)>) {
    let (shape, route) = match session {
        SessionShape::Connection => ("proxy", "answered by the proxy; no node sees it"),
        SessionShape::Transaction => (
            "transaction",
            "handled by the proxy; the queued commands run at EXEC on their slot's master",
        ),
    };
    out.push(("shape", shape.into()));
    out.push(("route", route.into()));
}

fn request_of(args: &[Bytes]) -> Request {
    let refs: SmallVec<[&[u8]; 8]> = args.iter().map(|arg| &arg[..]).collect();
    Request {
        raw: encode_request(&refs),
        args: args.iter().cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explanation() -> Explanation {
        let mut out = Explanation::default();
        out.push("command", "mset");
        out.push("key", "a slot 1 master n1");
        out.push("key", "b slot 2 master n2");
        out
    }

    #[test]
    fn resp2_is_a_flat_array_of_field_value_lines() {
        assert_eq!(
            &explanation().frame(Proto::Resp2)[..],
            b"*3\r\n$13\r\ncommand: mset\r\n$23\r\nkey: a slot 1 master n1\r\n$23\r\nkey: b slot 2 master n2\r\n"
        );
    }

    #[test]
    fn resp3_maps_each_field_once_to_its_values_in_order() {
        assert_eq!(
            &explanation().frame(Proto::Resp3)[..],
            b"%2\r\n$7\r\ncommand\r\n*1\r\n$4\r\nmset\r\n$3\r\nkey\r\n*2\r\n$18\r\na slot 1 master n1\r\n$18\r\nb slot 2 master n2\r\n"
        );
    }

    #[test]
    fn error_text_drops_the_frame_marks_only() {
        assert_eq!(error_text(b"-ERR no\r\n"), "ERR no");
        assert_eq!(error_text(b"-NOPERM x - y\r\n"), "NOPERM x - y");
    }

    #[test]
    fn every_field_has_a_place_in_the_order() {
        let mut out = explanation();
        out.push("reply", "ERR x");
        out.push("shape", "split");
        out.lines
            .sort_by_key(|(field, _)| FIELDS.iter().position(|f| f == field));
        let fields: Vec<&str> = out.lines.iter().map(|(field, _)| *field).collect();
        assert_eq!(fields, ["command", "shape", "key", "key", "reply"]);
        assert_eq!(
            out.values("key"),
            ["a slot 1 master n1", "b slot 2 master n2"]
        );
    }
}
