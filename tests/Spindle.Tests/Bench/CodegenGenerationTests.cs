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
    {
        string path = Path.Combine(FindRepositoryRoot(), CodegenSubjectsTemplate.OutputPath);
        Assert.True(File.Exists(path), $"{CodegenSubjectsTemplate.OutputPath} is missing. Run `dotnet run --project tools/Spindle.Generate` from the repository root.");
        string expected = CodegenSubjectsTemplate.Generate();
        string actual = File.ReadAllText(path).Replace("\r\n", "\n", StringComparison.Ordinal);
        if (actual == expected)
        {
            return;
        }
        string[] want = expected.Split('\n');
        string[] have = actual.Split('\n');
        int line = 0;
        while (line < want.Length && line < have.Length && want[line] == have[line])
        {
            line++;
        }
        Assert.Fail(
            $"{CodegenSubjectsTemplate.OutputPath} is stale: it differs from what tools/Spindle.Generate/CodegenSubjectsTemplate.cs " +
            $"generates, first at line {line + 1}.\n  generated: {(line < want.Length ? want[line] : "(end of file)")}\n  checked in: {(line < have.Length ? have[line] : "(end of file)")}\n" +
            "Do not edit the generated file: change the template, run `dotnet run --project tools/Spindle.Generate` from the repository root, and commit both.");
    }

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

    private static string FindRepositoryRoot([CallerFilePath] string thisFile = "")
    {
        string? dir = Path.GetDirectoryName(thisFile);
        while (dir is not null && !File.Exists(Path.Combine(dir, "Spindle.slnx")))
        {
            dir = Path.GetDirectoryName(dir);
        }
        Assert.True(dir is not null, "Could not find the repository root (Spindle.slnx) above " + thisFile);
        return dir!;
    }
}
