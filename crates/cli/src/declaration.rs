//! How `scan` and `inspect` print an input declaration and the features of a few events: what
//! a model will see, before any training.

use std::io::Write;

use gnn4c_features::Inputs;
use gnn4c_run::ShownEvent;

pub(crate) fn truncate(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

/// Every declared feature with its source: what the model will see.
pub(crate) fn show_declaration(out: &mut impl Write, inputs: &Inputs) -> anyhow::Result<()> {
    for (c, o) in inputs.objects.iter().enumerate() {
        let d = &o.decl;
        let kinematics: Vec<String> = o
            .kinematics
            .sources()
            .iter()
            .map(|(k, e)| format!("{k} = {}", e.text()))
            .collect();
        let fields: Vec<String> = d.fields.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let keep = if d.single {
            "one per event".to_owned()
        } else {
            format!(
                "select {}, at most {}",
                d.select.as_deref().unwrap_or("all"),
                d.max_objects
                    .map_or_else(|| "all".to_owned(), |m| m.to_string())
            )
        };
        writeln!(
            out,
            "  objects  {c} {:<10} {}{}; {keep}",
            d.name,
            kinematics.join(", "),
            if fields.is_empty() {
                String::new()
            } else {
                format!("; {}", fields.join(", "))
            }
        )?;
    }
    let describe = |f: &gnn4c_features::FeatureDecl| {
        let mut s = f.expr.clone();
        match f.standardize {
            Some(gnn4c_features::Standardize::Fixed(st)) if st.center == 0.0 => {
                s = format!("{s} / {}", st.scale);
            }
            Some(gnn4c_features::Standardize::Fixed(st)) => {
                s = format!("({s} - {}) / {}", st.center, st.scale);
            }
            Some(gnn4c_features::Standardize::Auto) => {
                s = format!("({s} - mean) / std  (auto: the training folds')");
            }
            None => {}
        }
        if let Some(fill) = f.fill {
            s.push_str(&format!("  (fill {fill})"));
        }
        s
    };
    for f in &inputs.spec.node_features {
        writeln!(out, "  node     {:<12} {}", f.name, describe(f))?;
    }
    for f in &inputs.spec.globals {
        writeln!(out, "  global   {:<12} {}", f.name, describe(f))?;
    }
    let pairs: Vec<&str> = inputs.spec.pairs.iter().map(|p| p.name()).collect();
    writeln!(out, "  pairs    {}", pairs.join(", "))?;
    Ok(())
}

/// One event's identity, weight, globals and node features, a row per node.
pub(crate) fn show_event(
    out: &mut impl Write,
    e: &ShownEvent,
    inputs: &Inputs,
) -> anyhow::Result<()> {
    let names: Vec<&str> = inputs
        .spec
        .node_features
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    let globals: Vec<&str> = inputs
        .spec
        .globals
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    let d = names.len().max(1);
    let g: Vec<String> = globals
        .iter()
        .zip(&e.global_features)
        .map(|(n, v)| format!("{n} {v:.4}"))
        .collect();
    let n = e.node_features.len() / d;
    writeln!(
        out,
        "\n{} entry {} (event {}): {n} nodes, {} edges, weight {}; globals: {}",
        e.id.sample,
        e.id.entry,
        e.id.event_number,
        n * n.saturating_sub(1),
        e.weight,
        g.join(", ")
    )?;
    let header: Vec<String> = names
        .iter()
        .map(|n| format!("{:>9}", truncate(n, 9)))
        .collect();
    writeln!(out, "  node  {}", header.join(""))?;
    for (i, row) in e.node_features.chunks(d).enumerate() {
        let cells: Vec<String> = row.iter().map(|x| format!("{x:>9.4}")).collect();
        writeln!(out, "  {i:>4}  {}", cells.join(""))?;
    }
    Ok(())
}
