//! The expression language's lexer and recursive-descent parser: a text into the tree of
//! [`super::Node`]s, errors at the position of the first thing that does not fit.

use std::fmt;

use super::{Aggregate, ExprError, FUNCTIONS, Func1, Node, Op2, err};

/// `text` parsed: the root of its tree.
pub(super) fn root(text: &str) -> Result<Node, ExprError> {
    let tokens = lex(text)?;
    let mut p = Parser {
        tokens,
        at: 0,
        len: text.chars().count(),
    };
    let root = p.or()?;
    if let Some(t) = p.tokens.get(p.at) {
        return Err(err(
            t.position,
            format!("unexpected {} after a complete expression", t.kind),
        ));
    }
    Ok(root)
}

#[derive(Debug, Clone, PartialEq)]
enum TokenKind {
    Num(f64),
    Name(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenKind::Num(x) => write!(f, "number {x}"),
            TokenKind::Name(n) => write!(f, "name '{n}'"),
            TokenKind::Op(o) => write!(f, "'{o}'"),
            TokenKind::LParen => f.write_str("'('"),
            TokenKind::RParen => f.write_str("')'"),
            TokenKind::Comma => f.write_str("','"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: TokenKind,
    position: usize,
}

const OPERATORS: [&str; 16] = [
    "**", "&&", "||", "<=", ">=", "==", "!=", "<", ">", "+", "-", "*", "/", "!", "^", "%",
];

fn lex(text: &str) -> Result<Vec<Token>, ExprError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let position = i;
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
                j += 1;
            }
            if j < chars.len() && (chars[j] == 'e' || chars[j] == 'E') {
                let mut k = j + 1;
                if k < chars.len() && (chars[k] == '+' || chars[k] == '-') {
                    k += 1;
                }
                if k < chars.len() && chars[k].is_ascii_digit() {
                    while k < chars.len() && chars[k].is_ascii_digit() {
                        k += 1;
                    }
                    j = k;
                }
            }
            let s: String = chars[i..j].iter().collect();
            let x: f64 = s
                .parse()
                .map_err(|_| err(position, format!("'{s}' is not a number")))?;
            out.push(Token {
                kind: TokenKind::Num(x),
                position,
            });
            i = j;
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let mut j = i;
            while j < chars.len()
                && (chars[j].is_alphanumeric() || chars[j] == '_' || chars[j] == '.')
            {
                j += 1;
            }
            out.push(Token {
                kind: TokenKind::Name(chars[i..j].iter().collect()),
                position,
            });
            i = j;
            continue;
        }
        let kind = match c {
            '(' => Some(TokenKind::LParen),
            ')' => Some(TokenKind::RParen),
            ',' => Some(TokenKind::Comma),
            _ => None,
        };
        if let Some(kind) = kind {
            out.push(Token { kind, position });
            i += 1;
            continue;
        }
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        let Some(op) = OPERATORS.iter().find(|o| rest.starts_with(**o)) else {
            return Err(err(position, format!("unexpected character '{c}'")));
        };
        if *op == "^" || *op == "%" {
            let hint = if *op == "^" {
                "write x**y or pow(x, y) for a power"
            } else {
                "there is no remainder operator"
            };
            return Err(err(
                position,
                format!("'{op}' is not an operator here ({hint})"),
            ));
        }
        out.push(Token {
            kind: TokenKind::Op(op),
            position,
        });
        i += op.len();
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    /// The text's length in characters: where an error at the end points.
    len: usize,
}

impl Parser {
    fn peek_op(&self, ops: &[&str]) -> Option<&'static str> {
        match self.tokens.get(self.at) {
            Some(Token {
                kind: TokenKind::Op(o),
                ..
            }) if ops.contains(o) => Some(o),
            _ => None,
        }
    }

    fn end_position(&self) -> usize {
        self.len
    }

    fn binary(
        &mut self,
        ops: &[(&str, Op2)],
        next: fn(&mut Parser) -> Result<Node, ExprError>,
        chain: bool,
    ) -> Result<Node, ExprError> {
        let mut lhs = next(self)?;
        let names: Vec<&str> = ops.iter().map(|(o, _)| *o).collect();
        while let Some(o) = self.peek_op(&names) {
            self.at += 1;
            let rhs = next(self)?;
            let op = ops
                .iter()
                .find(|(n, _)| *n == o)
                .map(|(_, op)| *op)
                .unwrap_or(Op2::Add);
            lhs = Node::Call2(op, Box::new(lhs), Box::new(rhs));
            if !chain {
                if let Some(t) = self.tokens.get(self.at)
                    && self.peek_op(&names).is_some()
                {
                    return Err(err(
                        t.position,
                        "comparisons do not chain: write a < b && b < c",
                    ));
                }
                break;
            }
        }
        Ok(lhs)
    }

    fn or(&mut self) -> Result<Node, ExprError> {
        self.binary(&[("||", Op2::Or)], Parser::and, true)
    }

    fn and(&mut self) -> Result<Node, ExprError> {
        self.binary(&[("&&", Op2::And)], Parser::comparison, true)
    }

    fn comparison(&mut self) -> Result<Node, ExprError> {
        self.binary(
            &[
                ("<", Op2::Lt),
                ("<=", Op2::Le),
                (">", Op2::Gt),
                (">=", Op2::Ge),
                ("==", Op2::Eq),
                ("!=", Op2::Ne),
            ],
            Parser::sum,
            false,
        )
    }

    fn sum(&mut self) -> Result<Node, ExprError> {
        self.binary(&[("+", Op2::Add), ("-", Op2::Sub)], Parser::product, true)
    }

    fn product(&mut self) -> Result<Node, ExprError> {
        self.binary(&[("*", Op2::Mul), ("/", Op2::Div)], Parser::unary, true)
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        match self.peek_op(&["-", "!", "+"]) {
            Some("-") => {
                self.at += 1;
                Ok(Node::Neg(Box::new(self.unary()?)))
            }
            Some("!") => {
                self.at += 1;
                Ok(Node::Not(Box::new(self.unary()?)))
            }
            Some(_) => {
                self.at += 1;
                self.unary()
            }
            None => self.power(),
        }
    }

    fn power(&mut self) -> Result<Node, ExprError> {
        let base = self.atom()?;
        if self.peek_op(&["**"]).is_some() {
            self.at += 1;
            let exponent = self.unary()?;
            return Ok(Node::Call2(Op2::Pow, Box::new(base), Box::new(exponent)));
        }
        Ok(base)
    }

    fn expect(&mut self, kind: &TokenKind, what: &str) -> Result<(), ExprError> {
        match self.tokens.get(self.at) {
            Some(t) if t.kind == *kind => {
                self.at += 1;
                Ok(())
            }
            Some(t) => Err(err(
                t.position,
                format!("expected {what}, found {}", t.kind),
            )),
            None => Err(err(
                self.end_position(),
                format!("expected {what} at the end"),
            )),
        }
    }

    fn atom(&mut self) -> Result<Node, ExprError> {
        let Some(t) = self.tokens.get(self.at).cloned() else {
            return Err(err(self.end_position(), "the expression ends too early"));
        };
        self.at += 1;
        match t.kind {
            TokenKind::Num(x) => Ok(Node::Num(x)),
            TokenKind::LParen => {
                let inner = self.or()?;
                self.expect(&TokenKind::RParen, "')'")?;
                Ok(inner)
            }
            TokenKind::Name(name) => {
                if !matches!(
                    self.tokens.get(self.at),
                    Some(Token {
                        kind: TokenKind::LParen,
                        ..
                    })
                ) {
                    if name == "pi" {
                        return Ok(Node::Num(std::f64::consts::PI));
                    }
                    return Ok(Node::Name {
                        name,
                        position: t.position,
                    });
                }
                self.at += 1;
                self.call(&name, t.position)
            }
            other => Err(err(t.position, format!("unexpected {other}"))),
        }
    }

    /// The rest of aggregate `name(` (`kind`) at `position`: a collection's field, or for
    /// `count` a collection, and the closing parenthesis.
    fn aggregate(
        &mut self,
        kind: Aggregate,
        name: &str,
        position: usize,
    ) -> Result<Node, ExprError> {
        let arg = self.tokens.get(self.at).cloned();
        let Some(Token {
            kind: TokenKind::Name(of),
            position: at,
        }) = arg
        else {
            return Err(err(
                arg.map_or(position, |t| t.position),
                format!(
                    "{name}(…) takes a collection's field (`{name}(jets.pt)`){}",
                    if kind == Aggregate::Count {
                        " or a collection (`count(jets)`)"
                    } else {
                        ""
                    }
                ),
            ));
        };
        self.at += 1;
        if kind != Aggregate::Count && !of.contains('.') {
            return Err(err(
                at,
                format!("{name}(…) takes collection.field, got '{of}'"),
            ));
        }
        if kind == Aggregate::Count && of.contains('.') {
            return Err(err(
                at,
                format!("count(…) takes a collection name, got '{of}'"),
            ));
        }
        self.expect(&TokenKind::RParen, "')'")?;
        Ok(Node::Aggregate {
            kind,
            of,
            position: at,
        })
    }

    fn call(&mut self, name: &str, position: usize) -> Result<Node, ExprError> {
        let aggregate = match name {
            "sum" => Some(Aggregate::Sum),
            "mean" => Some(Aggregate::Mean),
            "maxof" => Some(Aggregate::MaxOf),
            "minof" => Some(Aggregate::MinOf),
            "count" => Some(Aggregate::Count),
            _ => None,
        };
        if let Some(kind) = aggregate {
            return self.aggregate(kind, name, position);
        }
        let mut args = vec![self.or()?];
        while matches!(
            self.tokens.get(self.at),
            Some(Token {
                kind: TokenKind::Comma,
                ..
            })
        ) {
            self.at += 1;
            args.push(self.or()?);
        }
        self.expect(&TokenKind::RParen, "')' after the arguments")?;
        let one = |f: Func1, mut args: Vec<Node>| -> Result<Node, ExprError> {
            if args.len() != 1 {
                return Err(err(
                    position,
                    format!("{name}(…) takes 1 argument, got {}", args.len()),
                ));
            }
            Ok(Node::Call1(f, Box::new(args.remove(0))))
        };
        let two = |op: Op2, mut args: Vec<Node>| -> Result<Node, ExprError> {
            if args.len() != 2 {
                return Err(err(
                    position,
                    format!("{name}(…) takes 2 arguments, got {}", args.len()),
                ));
            }
            let b = args.remove(1);
            Ok(Node::Call2(op, Box::new(args.remove(0)), Box::new(b)))
        };
        match name {
            "abs" => one(Func1::Abs, args),
            "sqrt" => one(Func1::Sqrt, args),
            "exp" => one(Func1::Exp, args),
            "log" => one(Func1::Log, args),
            "sin" => one(Func1::Sin, args),
            "cos" => one(Func1::Cos, args),
            "tan" => one(Func1::Tan, args),
            "sinh" => one(Func1::Sinh, args),
            "cosh" => one(Func1::Cosh, args),
            "tanh" => one(Func1::Tanh, args),
            "asinh" => one(Func1::Asinh, args),
            "sign" => one(Func1::Sign, args),
            "atan2" => two(Op2::Atan2, args),
            "hypot" => two(Op2::Hypot, args),
            "pow" => two(Op2::Pow, args),
            "min" => two(Op2::Min, args),
            "max" => two(Op2::Max, args),
            _ => Err(ExprError {
                position,
                message: format!(
                    "unknown function '{name}'; the functions are {}",
                    FUNCTIONS.join(", ")
                ),
                unknown: Some(name.to_owned()),
            }),
        }
    }
}
