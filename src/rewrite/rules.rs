//! The rule file: its YAML shape, and compiling it into checked rules.
//!
//! Every check that can fail happens here, once, at load time, and every error names the
//! file and the rule (its position and family) so that an operator can find it.

use std::path::Path;

use serde::Deserialize;

use super::template::{
    after_prefix, no_prefix, tokenize, ClusterTemplate, LegacyPattern, MAX_CAPTURES,
};

/// Why a rule file or a prefix list was refused.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The file could not be read.
    #[error("cannot read layout file {path}: {source}")]
    Io {
        /// The path that was read.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The YAML does not parse into a rule file.
    #[error("layout file {source_name}: {message}")]
    Yaml {
        /// The file (or other source) name.
        source_name: String,
        /// The parser's message, with line and column when it gives them.
        message: String,
    },
    /// One rule is invalid.
    #[error("layout file {source_name}, rule {number} (family `{family}`): {reason}")]
    Rule {
        /// The file (or other source) name.
        source_name: String,
        /// 1-based position of the rule in the file.
        number: usize,
        /// The rule's family as written.
        family: String,
        /// What is wrong.
        reason: String,
    },
    /// The prefix list is unusable.
    #[error("layout file {source_name}: prefix `{prefix}`: {reason}")]
    Prefix {
        /// The file (or other source) name.
        source_name: String,
        /// The refused prefix.
        prefix: String,
        /// What is wrong.
        reason: String,
    },
    /// Neither the caller nor the file names a prefix.
    #[error("layout file {source_name}: no prefix given (use `prefixes:` or --prefix)")]
    NoPrefix {
        /// The file (or other source) name.
        source_name: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleFile {
    #[serde(default)]
    pub(crate) layout: Option<String>,
    #[serde(default)]
    pub(crate) prefixes: Vec<String>,
    pub(crate) rules: Vec<RuleEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleEntry {
    family: String,
    legacy: String,
    #[serde(default)]
    cluster: Option<String>,
    #[serde(default)]
    unchanged: bool,
    #[serde(default)]
    index: Option<IndexSpec>,
    #[serde(default)]
    bucket_of: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexSpec {
    key: String,
    member: String,
}

/// A rule's index: the sorted set that lists its keys, and the member naming one key.
#[derive(Clone, Debug)]
pub(crate) struct IndexTemplates {
    pub(crate) key: ClusterTemplate,
    pub(crate) member: ClusterTemplate,
}

/// A checked rule.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub(crate) family: u16,
    pub(crate) legacy: LegacyPattern,
    /// `None` for a rule that keeps the name unchanged.
    pub(crate) cluster: Option<ClusterTemplate>,
    pub(crate) index: Option<IndexTemplates>,
    /// The capture slot whose raw value the bucket hashes.
    pub(crate) bucket_of: Option<u8>,
}

/// Reads and parses `path` (the YAML only; compiling is [`compile_rule`]).
pub(crate) fn read_file(path: &Path) -> Result<String, LayoutError> {
    std::fs::read_to_string(path).map_err(|source| LayoutError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Parses the YAML text of a rule file.
pub(crate) fn parse_file(text: &str, source_name: &str) -> Result<RuleFile, LayoutError> {
    serde_yaml_ng::from_str(text).map_err(|error| LayoutError::Yaml {
        source_name: source_name.to_owned(),
        message: error.to_string(),
    })
}

/// Compiles one rule; `family` is the already assigned family id.
pub(crate) fn compile_rule(entry: &RuleEntry, family: u16) -> Result<Rule, String> {
    let valid_family = !entry.family.is_empty()
        && entry
            .family
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid_family {
        return Err("family must be letters, digits and `_` (it is a metric label)".into());
    }
    let legacy_pieces = after_prefix(&entry.legacy)?;
    let legacy = LegacyPattern::compile(&legacy_pieces, &entry.legacy)?;
    let unchanged = entry.unchanged || entry.cluster.as_deref() == Some(entry.legacy.as_str());
    if unchanged {
        if entry
            .cluster
            .as_deref()
            .is_some_and(|cluster| cluster != entry.legacy)
        {
            return Err("`unchanged: true` with a different `cluster` template".into());
        }
        if entry.index.is_some() || entry.bucket_of.is_some() {
            return Err("an unchanged rule takes no `index` or `bucket_of`".into());
        }
        return Ok(Rule {
            family,
            legacy,
            cluster: None,
            index: None,
            bucket_of: None,
        });
    }
    let cluster_text = entry
        .cluster
        .as_deref()
        .ok_or("needs `cluster` (or `unchanged: true`)")?;
    let names = legacy.names().to_vec();
    let cluster = ClusterTemplate::compile(&after_prefix(cluster_text)?, &names, cluster_text)?;
    let mut used = [false; MAX_CAPTURES];
    cluster
        .capture_slots()
        .for_each(|slot| used[usize::from(slot)] = true);
    if let Some(missing) = names.iter().enumerate().find(|(slot, _)| !used[*slot]) {
        return Err(format!(
            "capture `<{}>` is missing from the cluster template, so keys could not be mapped back",
            missing.1
        ));
    }
    let cluster_tag = cluster.hash_tag()?;
    let index = match &entry.index {
        None => None,
        Some(spec) => {
            let index = compile_index(spec, &names)?;
            let index_tag = index.key.hash_tag()?;
            if index_tag.is_none() || index_tag != cluster_tag {
                return Err(
                    "the index key must carry the same hash tag as the cluster key (one slot)"
                        .into(),
                );
            }
            Some(index)
        }
    };
    let needs_bucket =
        cluster.uses_bucket() || index.as_ref().is_some_and(|index| index.key.uses_bucket());
    let bucket_of = bucket_slot(entry.bucket_of.as_deref(), &names, needs_bucket)?;
    Ok(Rule {
        family,
        legacy,
        cluster: Some(cluster),
        index,
        bucket_of,
    })
}

/// Compiles a rule's index: key and member together must carry every capture of the
/// legacy pattern (`names`), so a listing can name the key. (Its hash tag is checked
/// against the cluster key's by the caller.)
fn compile_index(spec: &IndexSpec, names: &[String]) -> Result<IndexTemplates, String> {
    let key = ClusterTemplate::compile(&after_prefix(&spec.key)?, names, &spec.key)?;
    let member_pieces = tokenize(&spec.member)?;
    no_prefix(&member_pieces, &spec.member)?;
    let member = ClusterTemplate::compile(&member_pieces, names, &spec.member)?;
    if member.uses_bucket() {
        return Err("an index member cannot hold `<b>`".into());
    }
    let mut covered = [false; MAX_CAPTURES];
    key.capture_slots()
        .chain(member.capture_slots())
        .for_each(|slot| covered[usize::from(slot)] = true);
    if let Some(missing) = names.iter().enumerate().find(|(slot, _)| !covered[*slot]) {
        return Err(format!(
            "capture `<{}>` is in neither the index key nor the member, so listings could not name the key",
            missing.1
        ));
    }
    Ok(IndexTemplates { key, member })
}

/// The capture slot a rule's bucket hashes: `bucket_of` by name, or the only capture when
/// a template holds `<b>` (`needs_bucket`) and there is just one.
fn bucket_slot(
    bucket_of: Option<&str>,
    names: &[String],
    needs_bucket: bool,
) -> Result<Option<u8>, String> {
    match (bucket_of, needs_bucket) {
        (Some(name), _) => {
            let slot = names
                .iter()
                .position(|known| known == name)
                .ok_or_else(|| {
                    format!("bucket_of `{name}` is not a capture of the legacy pattern")
                })?;
            Ok(Some(slot as u8))
        }
        (None, true) if names.len() == 1 => Ok(Some(0)),
        (None, true) => Err("`<b>` with several captures needs `bucket_of`".into()),
        (None, false) => Ok(None),
    }
}

/// Checks the prefix list: non-empty names, no hash-tag braces, none inside another.
pub(crate) fn check_prefixes(prefixes: &[String], source_name: &str) -> Result<(), LayoutError> {
    let refuse = |prefix: &str, reason: &str| LayoutError::Prefix {
        source_name: source_name.to_owned(),
        prefix: prefix.to_owned(),
        reason: reason.to_owned(),
    };
    if prefixes.is_empty() {
        return Err(LayoutError::NoPrefix {
            source_name: source_name.to_owned(),
        });
    }
    for (at, prefix) in prefixes.iter().enumerate() {
        if prefix.is_empty() {
            return Err(refuse(prefix, "empty"));
        }
        if prefix.contains(['{', '}']) {
            return Err(refuse(
                prefix,
                "contains `{` or `}`, which would break the hash tags",
            ));
        }
        for other in &prefixes[..at] {
            if other == prefix {
                return Err(refuse(prefix, "listed twice"));
            }
            let nested = |outer: &str, inner: &str| {
                inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b':')
            };
            if nested(other, prefix) || nested(prefix, other) {
                return Err(refuse(prefix, &format!("overlaps prefix `{other}`")));
            }
        }
    }
    Ok(())
}

impl RuleEntry {
    /// The family as written.
    pub(crate) fn family(&self) -> &str {
        &self.family
    }

    /// The rule's description for [`super::RuleInfo`].
    pub(crate) fn info(&self, number: usize, unchanged: bool) -> super::RuleInfo {
        super::RuleInfo {
            number,
            family: self.family.clone(),
            legacy: self.legacy.clone(),
            cluster: if unchanged {
                None
            } else {
                self.cluster.clone()
            },
            index: self
                .index
                .as_ref()
                .map(|index| (index.key.clone(), index.member.clone())),
        }
    }
}
