using System;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using SpindleLib.Bench.Scenarios;
using SpindleLib.Generate;

namespace SpindleLib.Tests.Bench;

/// <summary>
/// The codegen scenario's chained methods are generated (tools/Spindle.Generate), never written by hand. This suite
/// compiles the same template (a linked file) and fails when the checked-in output is stale.
/// </summary>
public sealed class CodegenGenerationTests
{
    [Fact]
    public void CheckedInCodegenSubjects_AreWhatTheTemplateGenerates()
        => GeneratedFiles.AssertCurrent(CodegenSubjectsTemplate.OutputPath, nameof(CodegenSubjectsTemplate), CodegenSubjectsTemplate.Generate());

    [Fact]
    public void EverySubjectClass_HasTheChainedAsyncMethods()
    {
        Assembly bench = typeof(CodegenScenario).Assembly;
        foreach (var (cls, _, _) in CodegenSubjectsTemplate.Subjects)
        {
            Type? type = bench.GetType($"SpindleLib.Bench.Scenarios.CodegenSubjects+{cls}");
            Assert.True(type is not null, $"the bench assembly has no generated class {cls}.");
            MethodInfo[] methods = type!.GetMethods(BindingFlags.Public | BindingFlags.Static | BindingFlags.DeclaredOnly);
            Assert.Equal(
                Enumerable.Range(0, CodegenSubjectsTemplate.MethodCount).Select(CodegenSubjectsTemplate.MethodName),
                methods.Select(m => m.Name).OrderBy(n => n, StringComparer.Ordinal));
            Assert.All(methods, m => Assert.NotNull(m.GetCustomAttribute<AsyncStateMachineAttribute>()));
            Assert.Single(methods.Select(m => m.ReturnType).Distinct());
        }
    }
}
