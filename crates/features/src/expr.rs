//! The expression language of input declarations: parsed once, bound to columns once per file,
//! evaluated column-wise in f64.
//!
//! Grammar (C-like precedence, lowest first): `||`; `&&`; comparisons `< <= > >= == !=`; `+ -`;
//! `* /`; unary `-` and `!`; `**` (power, right-associative); atoms: numbers (`25`, `2.5e-3`),
//! names (branches or fields, dots allowed: `Jet.PT`), `pi`, calls and parentheses. Comparisons
//! and logic give 1 or 0; any non-zero value is true. Functions: `abs`, `sqrt`, `exp`, `log`,
//! `sin`, `cos`, `tan`, `sinh`, `cosh`, `tanh`, `asinh`, `atan2(y, x)`, `hypot(x, y)`,
//! `pow(x, y)`, `min(a, b)`, `max(a, b)`, `sign` (−1, 0, +1). Aggregates over an event's selected
//! objects, in event-level expressions only: `sum(jets.pt)`, `mean(jets.pt)`, `maxof(jets.pt)`,
//! `minof(jets.pt)` (0 for no objects) and `count(jets)`.

mod parse;

use std::fmt;

/// A parse or binding error: what is wrong and where (a 0-based character position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Character position in the expression text.
    pub position: usize,
    /// What is wrong.
    pub message: String,
    /// The name that could not be resolved, for a binding error.
    pub unknown: Option<String>,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at position {}", self.message, self.position + 1)
    }
}

impl std::error::Error for ExprError {}

fn err(position: usize, message: impl Into<String>) -> ExprError {
    ExprError {
        position,
        message: message.into(),
        unknown: None,
    }
}

/// A one-argument function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func1 {
    Abs,
    Sqrt,
    Exp,
    Log,
    Sin,
    Cos,
    Tan,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Sign,
}

impl Func1 {
    fn apply(self, x: f64) -> f64 {
        match self {
            Func1::Abs => x.abs(),
            Func1::Sqrt => x.sqrt(),
            Func1::Exp => x.exp(),
            Func1::Log => x.ln(),
            Func1::Sin => x.sin(),
            Func1::Cos => x.cos(),
            Func1::Tan => x.tan(),
            Func1::Sinh => x.sinh(),
            Func1::Cosh => x.cosh(),
            Func1::Tanh => x.tanh(),
            Func1::Asinh => x.asinh(),
            Func1::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }
        }
    }
}

/// A binary operation or two-argument function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op2 {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    Atan2,
    Hypot,
    Min,
    Max,
}

fn truth(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

impl Op2 {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            Op2::Add => a + b,
            Op2::Sub => a - b,
            Op2::Mul => a * b,
            Op2::Div => a / b,
            Op2::Pow => a.powf(b),
            Op2::Lt => truth(a < b),
            Op2::Le => truth(a <= b),
            Op2::Gt => truth(a > b),
            Op2::Ge => truth(a >= b),
            Op2::Eq => truth(a == b),
            Op2::Ne => truth(a != b),
            Op2::And => truth(a != 0.0 && b != 0.0),
            Op2::Or => truth(a != 0.0 || b != 0.0),
            Op2::Atan2 => a.atan2(b),
            Op2::Hypot => a.hypot(b),
            Op2::Min => a.min(b),
            Op2::Max => a.max(b),
        }
    }
}

/// An aggregate over an event's selected objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Aggregate {
    /// Σ of a field.
    Sum,
    /// Mean of a field (0 without objects).
    Mean,
    /// Largest value of a field (0 without objects).
    MaxOf,
    /// Smallest value of a field (0 without objects).
    MinOf,
    /// Number of objects.
    Count,
}

impl Aggregate {
    /// Its name in expressions.
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Sum => "sum",
            Aggregate::Mean => "mean",
            Aggregate::MaxOf => "maxof",
            Aggregate::MinOf => "minof",
            Aggregate::Count => "count",
        }
    }
}

/// A parsed expression; names are unresolved.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Num(f64),
    Name {
        name: String,
        position: usize,
    },
    Neg(Box<Node>),
    Not(Box<Node>),
    Call1(Func1, Box<Node>),
    Call2(Op2, Box<Node>, Box<Node>),
    Aggregate {
        kind: Aggregate,
        /// `jets` for `count(jets)`, `jets.pt` otherwise.
        of: String,
        position: usize,
    },
}

/// A parsed expression, with its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    text: String,
    root: Node,
}

/// A name an expression uses: a plain name (`Jet_pt`, `pt`) or an aggregate (`sum(jets.pt)`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameRef {
    /// A branch or field.
    Plain(String),
    /// An aggregate over a collection's field (`field` is empty for `count`).
    Aggregate {
        /// Which aggregate.
        kind: Aggregate,
        /// The collection.
        collection: String,
        /// The field.
        field: String,
    },
}

impl fmt::Display for NameRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameRef::Plain(n) => f.write_str(n),
            NameRef::Aggregate {
                kind: Aggregate::Count,
                collection,
                ..
            } => write!(f, "count({collection})"),
            NameRef::Aggregate {
                kind,
                collection,
                field,
            } => write!(f, "{}({collection}.{field})", kind.name()),
        }
    }
}

impl Node {
    fn name_ref(&self) -> Option<(NameRef, usize)> {
        match self {
            Node::Name { name, position } => Some((NameRef::Plain(name.clone()), *position)),
            Node::Aggregate { kind, of, position } => {
                let (collection, field) = of.split_once('.').unwrap_or((of, ""));
                Some((
                    NameRef::Aggregate {
                        kind: *kind,
                        collection: collection.to_owned(),
                        field: field.to_owned(),
                    },
                    *position,
                ))
            }
            _ => None,
        }
    }

    fn visit<'a>(&'a self, f: &mut dyn FnMut(&'a Node)) {
        f(self);
        match self {
            Node::Neg(a) | Node::Not(a) | Node::Call1(_, a) => a.visit(f),
            Node::Call2(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Node::Num(_) | Node::Name { .. } | Node::Aggregate { .. } => {}
        }
    }
}

impl Expr {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let root = parse::root(text)?;
        Ok(Expr {
            text: text.to_owned(),
            root,
        })
    }

    /// The expression's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The constant value of an expression without names.
    pub fn constant(&self) -> Option<f64> {
        if self.names().is_empty() {
            let mut out = Vec::new();
            Bound {
                root: bind_node(&self.root, &mut |_| None).ok()?,
            }
            .eval(&[], 1, &mut out);
            out.first().copied()
        } else {
            None
        }
    }

    /// Every name the expression uses, once each, in order of first use, with its position.
    pub fn names(&self) -> Vec<(NameRef, usize)> {
        let mut out: Vec<(NameRef, usize)> = Vec::new();
        self.root.visit(&mut |n| {
            if let Some((r, pos)) = n.name_ref()
                && !out.iter().any(|(o, _)| *o == r)
            {
                out.push((r, pos));
            }
        });
        out
    }

    /// Binds every name to a column index through `lookup`; the first name it does not know is
    /// an error at that name's position.
    pub fn bind(
        &self,
        lookup: &mut dyn FnMut(&NameRef) -> Option<usize>,
    ) -> Result<Bound, ExprError> {
        Ok(Bound {
            root: bind_node(&self.root, lookup)?,
        })
    }
}

fn bind_node(
    node: &Node,
    lookup: &mut dyn FnMut(&NameRef) -> Option<usize>,
) -> Result<BoundNode, ExprError> {
    Ok(match node {
        Node::Num(x) => BoundNode::Num(*x),
        Node::Name { .. } | Node::Aggregate { .. } => {
            let (r, position) = node
                .name_ref()
                .unwrap_or((NameRef::Plain(String::new()), 0));
            match lookup(&r) {
                Some(k) => BoundNode::Column(k),
                None => {
                    let what = match &r {
                        NameRef::Plain(_) => "unknown name",
                        NameRef::Aggregate { .. } => "unknown aggregate",
                    };
                    return Err(ExprError {
                        position,
                        message: format!("{what} '{r}'"),
                        unknown: Some(r.to_string()),
                    });
                }
            }
        }
        Node::Neg(a) => BoundNode::Neg(Box::new(bind_node(a, lookup)?)),
        Node::Not(a) => BoundNode::Not(Box::new(bind_node(a, lookup)?)),
        Node::Call1(f, a) => BoundNode::Call1(*f, Box::new(bind_node(a, lookup)?)),
        Node::Call2(op, a, b) => BoundNode::Call2(
            *op,
            Box::new(bind_node(a, lookup)?),
            Box::new(bind_node(b, lookup)?),
        ),
    })
}

#[derive(Debug, Clone, PartialEq)]
enum BoundNode {
    Num(f64),
    Column(usize),
    Neg(Box<BoundNode>),
    Not(Box<BoundNode>),
    Call1(Func1, Box<BoundNode>),
    Call2(Op2, Box<BoundNode>, Box<BoundNode>),
}

/// An expression whose names are column indices: evaluated column-wise.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    root: BoundNode,
}

impl Bound {
    /// Evaluates the expression over `n` rows of `columns` (each at least `n` long) into `out`
    /// (cleared first), in f64.
    pub fn eval(&self, columns: &[&[f64]], n: usize, out: &mut Vec<f64>) {
        out.clear();
        eval_node(&self.root, columns, n, out);
    }

    /// Every column the expression reads.
    pub fn columns(&self) -> Vec<usize> {
        fn walk(n: &BoundNode, out: &mut Vec<usize>) {
            match n {
                BoundNode::Num(_) => {}
                BoundNode::Column(k) => {
                    if !out.contains(k) {
                        out.push(*k);
                    }
                }
                BoundNode::Neg(a) | BoundNode::Not(a) | BoundNode::Call1(_, a) => walk(a, out),
                BoundNode::Call2(_, a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }
}

/// Appends the `n` values of `node` to `out`.
fn eval_node(node: &BoundNode, columns: &[&[f64]], n: usize, out: &mut Vec<f64>) {
    let start = out.len();
    match node {
        BoundNode::Num(x) => out.resize(start + n, *x),
        BoundNode::Column(k) => out.extend_from_slice(&columns[*k][..n]),
        BoundNode::Neg(a) => {
            eval_node(a, columns, n, out);
            out[start..].iter_mut().for_each(|x| *x = -*x);
        }
        BoundNode::Not(a) => {
            eval_node(a, columns, n, out);
            out[start..].iter_mut().for_each(|x| *x = truth(*x == 0.0));
        }
        BoundNode::Call1(f, a) => {
            eval_node(a, columns, n, out);
            out[start..].iter_mut().for_each(|x| *x = f.apply(*x));
        }
        BoundNode::Call2(op, a, b) => {
            eval_node(a, columns, n, out);
            // A constant right-hand side (`pt / 100`) needs no column of its own.
            if let BoundNode::Num(y) = **b {
                out[start..].iter_mut().for_each(|x| *x = op.apply(*x, y));
                return;
            }
            let mut rhs = Vec::with_capacity(n);
            eval_node(b, columns, n, &mut rhs);
            out[start..]
                .iter_mut()
                .zip(&rhs)
                .for_each(|(x, y)| *x = op.apply(*x, *y));
        }
    }
}

/// Every function name, for messages and docs.
pub const FUNCTIONS: [&str; 22] = [
    "abs", "sqrt", "exp", "log", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asinh", "sign",
    "atan2", "hypot", "pow", "min", "max", "sum", "mean", "maxof", "minof", "count",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str, names: &[(&str, &[f64])]) -> Vec<f64> {
        let e = Expr::parse(text).expect("parses");
        let b = e
            .bind(&mut |r| match r {
                NameRef::Plain(n) => names.iter().position(|(m, _)| m == n),
                NameRef::Aggregate { .. } => None,
            })
            .expect("binds");
        let cols: Vec<&[f64]> = names.iter().map(|(_, c)| *c).collect();
        let n = cols.first().map_or(1, |c| c.len());
        let mut out = Vec::new();
        b.eval(&cols, n, &mut out);
        out
    }

    #[test]
    fn precedence_and_functions_match_rust_f64() {
        let pt = [30.0, 10.0, 55.5];
        let eta = [0.5, -2.6, 1.2];
        let got = eval(
            "pt > 25 && abs(eta) < 2.4 || !(pt < 11)",
            &[("pt", &pt), ("eta", &eta)],
        );
        assert_eq!(got, vec![1.0, 0.0, 1.0]);
        let got = eval("-pt**2 / 100 + sqrt(pt) * 2 - 1", &[("pt", &pt)]);
        let want: Vec<f64> = pt
            .iter()
            .map(|p| -(p.powf(2.0)) / 100.0 + p.sqrt() * 2.0 - 1.0)
            .collect();
        assert_eq!(got, want);
        let got = eval(
            "atan2(eta, pt) + hypot(pt, eta) + max(pt, 50) + min(eta, 0)",
            &[("pt", &pt), ("eta", &eta)],
        );
        let want: Vec<f64> = pt
            .iter()
            .zip(&eta)
            .map(|(p, e)| e.atan2(*p) + p.hypot(*e) + p.max(50.0) + e.min(0.0))
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            eval("phi / pi", &[("phi", &[1.0])]),
            vec![1.0 / std::f64::consts::PI]
        );
        assert_eq!(
            eval("sign(q)", &[("q", &[-3.0, 0.0, 2.0])]),
            vec![-1.0, 0.0, 1.0]
        );
        assert_eq!(
            eval("2 ** 3 ** 2", &[]),
            vec![512.0],
            "** is right-associative"
        );
        assert_eq!(eval("1.5e-3 * 1000 + .5", &[]), vec![2.0]);
        assert_eq!(
            eval("log(exp(1)) + cosh(0) + sinh(0) + cos(0) + sin(0)", &[]),
            vec![3.0]
        );
    }

    #[test]
    fn names_are_listed_once_with_aggregates() {
        let e =
            Expr::parse("sum(jets.pt) / 1000 + count(jets) + n_nodes * n_nodes").expect("parses");
        let names: Vec<String> = e.names().into_iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(names, vec!["sum(jets.pt)", "count(jets)", "n_nodes"]);
        assert_eq!(
            Expr::parse("0.000511").expect("parses").constant(),
            Some(0.000511)
        );
        assert_eq!(Expr::parse("Jet_pt").expect("parses").constant(), None);
    }

    #[test]
    fn errors_say_where() {
        let e = Expr::parse("pt > 25 &&").unwrap_err();
        assert!(e.message.contains("ends too early"), "{e}");
        let e = Expr::parse("pt ^ 2").unwrap_err();
        assert_eq!(e.position, 3);
        assert!(e.to_string().contains("pow(x, y)"), "{e}");
        let e = Expr::parse("1 < x < 2").unwrap_err();
        assert!(e.message.contains("do not chain"), "{e}");
        let e = Expr::parse("logg(pt)").unwrap_err();
        assert_eq!((e.position, e.unknown.as_deref()), (0, Some("logg")));
        let e = Expr::parse("abs(pt, eta)").unwrap_err();
        assert!(e.message.contains("1 argument"), "{e}");
        let e = Expr::parse("Jet_pt + Jet_ptt")
            .unwrap()
            .bind(&mut |r| (r == &NameRef::Plain("Jet_pt".into())).then_some(0))
            .unwrap_err();
        assert_eq!((e.position, e.unknown.as_deref()), (9, Some("Jet_ptt")));
        assert!(Expr::parse("sum(jets)").is_err());
        assert!(Expr::parse("(pt").is_err());
        assert!(Expr::parse("pt)").is_err());
    }
}
