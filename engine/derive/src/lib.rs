//! `#[derive(Codec)]`: the buffer-queue codec of a record type
//! (`tandem::standby::codec::Codec`), written field by field as one would
//! by hand — the fields in declaration order, each with its own codec; an
//! enum's variant as a one-byte tag (a four-byte tag past 256 variants)
//! before its fields. Generic parameters get a `Codec` bound.
//!
//! Use it through `tandem`, which re-exports it beside the trait:
//!
//! ```ignore
//! use tandem::standby::codec::Codec;
//!
//! #[derive(Clone, Codec)]
//! struct Click { user: u64, page: String, at_ms: u64 }
//! ```

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{parse_macro_input, Data, DeriveInput, Fields, Ident};

/// Derives `tandem::standby::codec::Codec` (see the crate docs).
#[proc_macro_derive(Codec)]
pub fn derive_codec(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let codec = quote!(::tandem::standby::codec::Codec);
    let error = quote!(::tandem::standby::codec::CodecError);
    let name = &input.ident;
    let mut generics = input.generics.clone();
    for p in generics.type_params_mut() {
        p.bounds
            .push(syn::parse_quote!(::tandem::standby::codec::Codec));
    }
    let (imp, ty, wh) = generics.split_for_impl();
    let (encode, decode) = match &input.data {
        Data::Struct(s) => {
            let (binds, pattern) = bindings(&s.fields);
            let encode = quote! {
                let #name #pattern = self;
                #( #codec::encode(#binds, __out); )*
            };
            let decode = quote! {
                #( let (#binds, __bytes) = #codec::decode(__bytes)?; )*
                ::core::result::Result::Ok((#name #pattern, __bytes))
            };
            (encode, decode)
        }
        Data::Enum(e) => {
            if e.variants.is_empty() {
                return Err(syn::Error::new_spanned(
                    name,
                    "Codec cannot be derived for an enum without variants",
                ));
            }
            let wide = e.variants.len() > 256;
            let mut enc = Vec::new();
            let mut dec = Vec::new();
            for (i, v) in e.variants.iter().enumerate() {
                let vname = &v.ident;
                let (binds, pattern) = bindings(&v.fields);
                let tag = if wide {
                    let t = i as u32;
                    quote!(#codec::encode(&#t, __out);)
                } else {
                    let t = i as u8;
                    quote!(__out.push(#t);)
                };
                enc.push(quote! {
                    #name::#vname #pattern => {
                        #tag
                        #( #codec::encode(#binds, __out); )*
                    }
                });
                let t = if wide {
                    let t = i as u32;
                    quote!(#t)
                } else {
                    let t = i as u8;
                    quote!(#t)
                };
                dec.push(quote! {
                    #t => {
                        #( let (#binds, __bytes) = #codec::decode(__bytes)?; )*
                        ::core::result::Result::Ok((#name::#vname #pattern, __bytes))
                    }
                });
            }
            let tag_ty = if wide { quote!(u32) } else { quote!(u8) };
            let what = name.to_string();
            let encode = quote! {
                match self { #( #enc )* }
            };
            let decode = quote! {
                let (__tag, __bytes) = <#tag_ty as #codec>::decode(__bytes)?;
                match __tag {
                    #( #dec )*
                    __other => ::core::result::Result::Err(#error(::std::format!(
                        "{} is not a variant of {}", __other, #what
                    ))),
                }
            };
            (encode, decode)
        }
        Data::Union(u) => {
            return Err(syn::Error::new_spanned(
                u.union_token,
                "Codec cannot be derived for a union",
            ))
        }
    };
    Ok(quote! {
        #[automatically_derived]
        impl #imp #codec for #name #ty #wh {
            #[allow(unused_variables)]
            fn encode(&self, __out: &mut ::std::vec::Vec<u8>) {
                #encode
            }
            #[allow(unused_variables)]
            fn decode(__bytes: &[u8]) -> ::core::result::Result<(Self, &[u8]), #error> {
                #decode
            }
        }
    })
}

/// One binding per field (`__field0`, `__field1`, …: names no field or
/// parameter can clash with), and the pattern that binds them:
/// `{ a: __field0, b: __field1 }`, `(__field0, __field1)` or nothing.
fn bindings(fields: &Fields) -> (Vec<Ident>, Tokens) {
    let names: Vec<Ident> = (0..fields.len())
        .map(|i| format_ident!("__field{}", i))
        .collect();
    let pattern = match fields {
        Fields::Named(f) => {
            let idents = f
                .named
                .iter()
                .map(|f| f.ident.as_ref().expect("a named field"));
            quote!({ #( #idents: #names ),* })
        }
        Fields::Unnamed(_) => quote!(( #( #names ),* )),
        Fields::Unit => Tokens::new(),
    };
    (names, pattern)
}
