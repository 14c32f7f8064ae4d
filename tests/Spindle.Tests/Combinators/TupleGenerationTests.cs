using System;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using SpindleLib.Generate;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// The tuple forms are generated (tools/Spindle.Generate), never written by hand. This suite compiles the same template
/// (a linked file) and fails when the checked-in output is stale.
/// </summary>
public sealed class TupleGenerationTests
{
    [Fact]
    public void CheckedInTupleForms_AreWhatTheTemplateGenerates()
        => GeneratedFiles.AssertCurrent(TupleCombinatorsTemplate.OutputPath, nameof(TupleCombinatorsTemplate), TupleCombinatorsTemplate.Generate());

    [Fact]
    public void EveryArity_HasItsWhenAllAndWhenAnyForms()
    {
        MethodInfo[] methods = typeof(SpindleTask).GetMethods(BindingFlags.Public | BindingFlags.Static);
        for (int n = TupleCombinatorsTemplate.MinArity; n <= TupleCombinatorsTemplate.MaxArity; n++)
        {
            int arity = n;
            bool IsTupleForm(MethodInfo m) => m.IsGenericMethodDefinition && m.GetGenericArguments().Length == arity
                && m.GetParameters().Count(p => p.ParameterType.IsGenericType && p.ParameterType.GetGenericTypeDefinition() == typeof(SpindleTask<>)) == arity;
            Assert.Equal(2, methods.Count(m => m.Name == nameof(SpindleTask.WhenAll) && IsTupleForm(m)));
            Assert.Equal(1, methods.Count(m => m.Name == nameof(SpindleTask.WhenAny) && IsTupleForm(m)));
        }
    }
}
